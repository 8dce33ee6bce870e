#!/usr/bin/env bash
# End-to-end check of the rig: build (or reuse) the binaries, bring up two
# rigs at once, prove kwok + scheduler + kube-controller-manager work on one of
# them, prove the --owner-pid watchdog cleans up after a dead owner, and prove
# `down` leaves no process behind. Exits non-zero on the first failed check.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rig=$here/rig
passed=0

say() { printf 'smoke: %s\n' "$*" >&2; }
ok() {
	passed=$((passed + 1))
	say "ok - $*"
}
die() {
	say "FAILED - $*"
	printf '%d passed, 1 failed\n' "$passed"
	exit 1
}

# Processes whose command line mentions PATH (pgrep -f, or /proc if procps is
# missing), excluding this script and its pipeline.
procs_of() {
	if command -v pgrep >/dev/null; then
		pgrep -f -- "$1" | grep -vx -e "$$" -e "$BASHPID" || true
	else
		grep -lsF -- "$1" /proc/[0-9]*/cmdline | cut -d/ -f3 | grep -vx -e "$$" -e "$BASHPID" || true
	fi
}

main() {
	work=$(mktemp -d "${TMPDIR:-/tmp}/kubectl-karpenter-rig-smoke.XXXXXX")
	a=$work/a b=$work/b c=$work/c
	cleanup() {
		local d
		for d in "$a" "$b" "$c"; do
			"$rig" down "$d" >/dev/null 2>&1 || true
		done
		rm -rf "$work"
	}
	trap cleanup EXIT

	# --- build ---------------------------------------------------------------
	ms() { echo $(($(date +%s%N) / 1000000)); }
	t0=$(ms)
	bin=$("$rig" build | tail -n 1)
	build_ms=$(($(ms) - t0))
	[[ -x $bin/kube-apiserver && -x $bin/kubectl && -x $bin/etcd && -x $bin/kwok ]] || die "bin dir $bin lacks binaries"
	[[ $("$rig" bin | tail -n 1) == "$bin" ]] || die "rig bin disagrees with rig build"
	ok "build -> $bin (${build_ms} ms)"

	# --- two rigs at once ----------------------------------------------------
	t0=$(ms)
	"$rig" up "$a" --owner-pid $$ >"$work/up-a.out" 2>"$work/up-a.err" &
	up_a=$!
	"$rig" up "$b" --owner-pid $$ >"$work/up-b.out" 2>"$work/up-b.err" &
	up_b=$!
	wait $up_a || { cat "$work/up-a.err" >&2; die "up a"; }
	wait $up_b || { cat "$work/up-b.err" >&2; die "up b"; }
	ok "two rigs up concurrently in $(($(ms) - t0)) ms"
	grep -q "^KUBECONFIG=$a/kubeconfig\$" "$a/env" || die "env of a lacks KUBECONFIG"
	grep -q "^RIG_BIN=$bin\$" "$a/env" || die "env of a lacks RIG_BIN"
	[[ $(tail -n 1 "$work/up-a.out") == "$(tail -n 1 "$a/env")" ]] || die "up does not print the env file"
	server_a=$(grep '^RIG_APISERVER=' "$a/env")
	server_b=$(grep '^RIG_APISERVER=' "$b/env")
	[[ $server_a != "$server_b" ]] || die "both rigs share $server_a"
	"$rig" status "$a" >/dev/null || die "status a"
	ok "env, kubeconfig and status; a=${server_a#*=} b=${server_b#*=}"

	ka() { "$bin/kubectl" --kubeconfig "$a/kubeconfig" "$@"; }
	kb() { "$bin/kubectl" --kubeconfig "$b/kubeconfig" "$@"; }

	# The binaries must report the pinned release, not v0.0.0-master.
	want=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$here/go/kube/go.mod")
	got=$(ka get --raw /version | grep -o '"gitVersion": *"[^"]*"' | grep -o 'v[^"]*')
	[[ $got == "$want" ]] || die "apiserver reports $got, want $want"
	got=$(ka version --client -o yaml | grep -m1 'gitVersion:' | awk '{ print $2 }')
	[[ $got == "$want" ]] || die "kubectl reports $got, want $want"
	ok "apiserver and kubectl report $want"

	# --- kwok makes labelled Nodes Ready, and only those ---------------------
	ka apply -f - >/dev/null <<-'EOF'
	apiVersion: v1
	kind: Node
	metadata:
	  name: fake-1
	  labels:
	    kwok.x-k8s.io/node: fake
	    kubernetes.io/hostname: fake-1
	  annotations:
	    kwok.x-k8s.io/node: fake
	status:
	  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
	  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
	---
	apiVersion: v1
	kind: Node
	metadata:
	  name: not-kwok
	  labels:
	    kubernetes.io/hostname: not-kwok
	EOF
	ka wait node/fake-1 --for=condition=Ready --timeout=60s >/dev/null || die "node fake-1 never became Ready"
	ok "labelled Node became Ready"
	[[ -z $(kb get nodes -o name) ]] || die "rig b sees rig a's nodes"
	ok "rig b is a separate cluster"

	# --- the real scheduler binds, kwok runs ----------------------------------
	ka apply -f - >/dev/null <<-'EOF'
	apiVersion: v1
	kind: Pod
	metadata:
	  name: lone
	  namespace: default
	spec:
	  nodeSelector:
	    kwok.x-k8s.io/node: fake
	  containers:
	  - name: c
	    image: registry.invalid/none:1
	    resources:
	      requests: {cpu: 100m, memory: 64Mi}
	EOF
	ka wait pod/lone --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null || {
		ka describe pod/lone >&2 || true
		die "pod lone never Running"
	}
	[[ $(ka get pod lone -o jsonpath='{.spec.nodeName}') == fake-1 ]] || die "pod lone not on fake-1"
	ok "Pod scheduled onto fake-1 and Running"

	# --- kube-controller-manager: Deployment -> ReplicaSet -> Pods ------------
	ka apply -f - >/dev/null <<-'EOF'
	apiVersion: apps/v1
	kind: Deployment
	metadata:
	  name: inflate
	  namespace: default
	spec:
	  replicas: 2
	  selector:
	    matchLabels: {app: inflate}
	  template:
	    metadata:
	      labels: {app: inflate}
	    spec:
	      nodeSelector:
	        kwok.x-k8s.io/node: fake
	      containers:
	      - name: c
	        image: registry.invalid/none:1
	        resources:
	          requests: {cpu: 100m, memory: 64Mi}
	EOF
	ka rollout status deployment/inflate --timeout=90s >/dev/null || {
		ka get pods -o wide >&2 || true
		die "deployment inflate never rolled out"
	}
	running=$(ka get pods -l app=inflate --field-selector=status.phase=Running -o name | wc -l)
	[[ $running -eq 2 ]] || die "expected 2 Running inflate pods, got $running"
	ok "Deployment with 2 replicas Running"

	# The unlabelled node must have been left alone the whole time.
	ready=$(ka get node not-kwok -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')
	[[ $ready != True ]] || die "kwok managed the unlabelled node"
	ok "unlabelled Node left alone by kwok"

	# --- the watchdog downs a rig whose owner died ----------------------------
	sleep 600 &
	owner=$!
	"$rig" up "$c" --owner-pid "$owner" >/dev/null 2>"$work/up-c.err" || { cat "$work/up-c.err" >&2; die "up c"; }
	kill "$owner"
	wait "$owner" 2>/dev/null || true
	for _ in $(seq 1 100); do
		[[ -z $(procs_of "$c") ]] && break
		sleep 0.2
	done
	[[ -z $(procs_of "$c") ]] || die "watchdog left processes of c: $(procs_of "$c" | tr '\n' ' ')"
	ok "watchdog downed rig c after its owner died"

	# --- down -----------------------------------------------------------------
	"$rig" down "$a" 2>/dev/null || die "down a"
	"$rig" down "$b" 2>/dev/null || die "down b"
	[[ -z $(procs_of "$a") ]] || die "processes of a remain: $(procs_of "$a" | tr '\n' ' ')"
	[[ -z $(procs_of "$b") ]] || die "processes of b remain: $(procs_of "$b" | tr '\n' ' ')"
	[[ -f $a/logs/kube-apiserver.log ]] || die "down removed the logs"
	"$rig" down "$a" 2>/dev/null || die "second down a"
	! "$rig" status "$a" >/dev/null || die "status a says running after down"
	ok "down stopped everything, kept logs, and is idempotent"

	"$rig" down "$a" --purge 2>/dev/null || die "down --purge"
	[[ ! -e $a ]] || die "down --purge left $a"
	ok "down --purge removed the dir"

	printf '%d passed, 0 failed\n' "$passed"
}

# On one line, so an edit to this file while it runs cannot change what runs.
main "$@"; exit
