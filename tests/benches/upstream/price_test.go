//go:build test_performance

// Package upstream only exists to run upstream Karpenter's scheduler on the benchmark workload
// of tests/benches/scheduling.rs. Upstream's own BenchmarkSchedulingN reports pods/s and node
// counts but not the price of its plan; this test builds the same workload with upstream's
// exported test helpers (the same calls its benchmark makes), solves it once per size, and
// prints the plan's hourly price: every NodeClaim at its cheapest instance-type option, which
// is what upstream's fake cloud provider launches.
//
// Run by tests/benches/compare-upstream; by hand:
//
//	GOTOOLCHAIN=go1.26.9 go test -tags test_performance -run TestUpstreamPlanPrice -v .
package upstream

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"
)

func init() {
	log.SetLogger(logging.NopLogger)
}

var labelValues = []string{"a", "b", "c", "d", "e", "f", "g"}

type workload struct{ r *rand.Rand }

func (w workload) label() string { return labelValues[w.r.Intn(len(labelValues))] }

func (w workload) requests() corev1.ResourceRequirements {
	cpu := []int{100, 250, 500, 1000, 1500}
	mem := []int{100, 256, 512, 1024, 2048, 4096}
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(fmt.Sprintf("%dm", cpu[w.r.Intn(len(cpu))])),
		corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", mem[w.r.Intn(len(mem))])),
	}}
}

func (w workload) pod(labels map[string]string, opts test.PodOptions) *corev1.Pod {
	opts.ObjectMeta = metav1.ObjectMeta{Labels: labels, UID: uuid.NewUUID()}
	opts.ResourceRequirements = w.requests()
	return test.Pod(opts)
}

// diversePods follows makeDiversePods in scheduling_benchmark_test.go.
func (w workload) diversePods(count int) []*corev1.Pod {
	var pods []*corev1.Pod
	fifth := count / 5
	for i := 0; i < fifth; i++ {
		pods = append(pods, w.pod(map[string]string{"my-label": w.label()}, test.PodOptions{}))
	}
	for _, key := range []string{corev1.LabelTopologyZone, corev1.LabelHostname} {
		for i := 0; i < fifth; i++ {
			labels := map[string]string{"my-label": w.label()}
			pods = append(pods, w.pod(labels, test.PodOptions{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"my-label": w.label()}},
			}}}))
		}
	}
	for i := 0; i < fifth; i++ {
		labels := map[string]string{"my-affininity": w.label()}
		pods = append(pods, w.pod(labels, test.PodOptions{PodRequirements: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelTopologyZone,
		}}}))
	}
	for i := 0; i < fifth; i++ {
		labels := map[string]string{"app": "nginx"}
		pods = append(pods, w.pod(labels, test.PodOptions{PodAntiRequirements: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname,
		}}}))
	}
	for len(pods) < count {
		pods = append(pods, w.pod(map[string]string{"my-label": w.label()}, test.PodOptions{}))
	}
	return pods
}

func TestUpstreamPlanPrice(t *testing.T) {
	sizes := []int{1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000}
	if s := os.Getenv("UPSTREAM_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("UPSTREAM_SIZES: %s", err)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		ctx := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
		pods := workload{rand.New(rand.NewSource(42))}.diversePods(n) //nolint:gosec
		nodePool := test.NodePool(v1.NodePool{Spec: v1.NodePoolSpec{Limits: v1.Limits{
			corev1.ResourceCPU:    resource.MustParse("10000000"),
			corev1.ResourceMemory: resource.MustParse("10000000Gi"),
		}}})
		cloudProvider := fake.NewCloudProvider()
		instanceTypes := fake.InstanceTypes(400)
		cloudProvider.InstanceTypes = instanceTypes
		client := fakecr.NewFakeClient()
		clk := &clock.RealClock{}
		cluster := state.NewCluster(clk, client, cloudProvider)
		its := map[string][]*cloudprovider.InstanceType{nodePool.Name: instanceTypes}
		topology, err := scheduling.NewTopology(ctx, client, cluster, nil, []*v1.NodePool{nodePool}, its, pods, scheduling.NumConcurrentReconciles(5))
		if err != nil {
			t.Fatalf("topology: %s", err)
		}
		scheduler := scheduling.NewScheduler(ctx, client, []*v1.NodePool{nodePool}, cluster, nil, topology, its, nil,
			events.NewRecorder(&record.FakeRecorder{}), clk, nil, nil, scheduling.NumConcurrentReconciles(5))
		start := time.Now()
		results, err := scheduler.Solve(ctx, pods)
		elapsed := time.Since(start)
		if err != nil {
			t.Fatalf("solve: %s", err)
		}
		price := 0.0
		for _, nc := range results.NewNodeClaims {
			cheapest := math.Inf(1)
			for _, it := range nc.InstanceTypeOptions {
				offerings := it.Offerings.Available().Compatible(nc.Requirements)
				if len(offerings) > 0 {
					cheapest = math.Min(cheapest, offerings.Cheapest().Price)
				}
			}
			price += cheapest
		}
		fmt.Printf("UPSTREAM pods=%d nodes=%d price=%.4f unschedulable=%d solve_seconds=%.3f\n",
			n, len(results.NewNodeClaims), price, len(results.PodErrors), elapsed.Seconds())
	}
}
