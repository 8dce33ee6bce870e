#!/usr/bin/env bash
# Measures the agent on the rig: scale a Deployment to N pods (default: 15, then 2000) with the
# kwok provider and report the time from a pod becoming unschedulable to the agent's first
# decision on it (a node, an in-flight claim or a new one: upstream's
# karpenter_pods_scheduling_decision_duration_seconds) and to the first new NodeClaim made for
# it (the agent's own histogram; a pod placed on earlier claims' room is counted only if it
# loses that room and gets a claim of its own), the time until every pod runs, the agent's peak RSS
# (VmHWM), its CPU time over the scale-up, each round's wall time (from its log), and what closed
# the provisioning batches. A figure, not a test.
#
# N:M adds a scale-down phase: once N pods run, scale to M and wait until the fleet settles (no
# NodeClaim being deleted, and no NodeClaim or Node created or deleted for SETTLE_SECONDS, 60 by
# default, longer than one disruption command takes: 10 s poll + 15 s validation), then print the
# fleet's $/h (the nodes' eks-node-viewer/instance-price labels), the $/h of the scheduler's plan
# for the M pods from scratch (`cargo bench --bench disruption -- --plan M`, same catalogue and
# NodePool), their ratio, and the time from the scale-down to the last change. The NodePool's
# consolidateAfter is set to CONSOLIDATE_AFTER (default 0s) when the scale-down starts.
#
# Usage: tests/kwok/scale.sh [N[:M] ...]      e.g. tests/kwok/scale.sh 2000:200
# Environment: AGENT_BIN=path (default $CARGO_TARGET_DIR/debug/karpenter-agent, built first);
# anything the agent reads passes through to it (its allocator is mimalloc: agent/src/main.rs).
# SCALE_DOWN_TIMEOUT (seconds, default 1800) bounds the wait for the fleet to settle.
# ARRIVAL=S spreads the scale-up over S seconds (one `kubectl scale` a second, N/S pods each),
# as pods keep arriving in a real scale-out; the figures then include the time from the last
# pod's creation to every pod running, the kube-scheduler's side from its Events (how long
# after its creation it found each pod unschedulable, which is when the agent can act, and its
# last verdict and binding), and the fleet's $/h against the scheduler's one-shot plan for N.
# POD_CPU overrides each pod's CPU request; INSTANCE_TYPES=a,b limits the NodePool to those types
# (e.g. POD_CPU=400m INSTANCE_TYPES=m5.large: four pods a node, so 20,000 pods make 5,000 nodes).
# RUN_TIMEOUT (seconds, default 600) bounds the wait for every pod to run. STATUS_BIN (default
# target/release/kubectl-karpenter when built) is timed running `status` on the full rig, each
# run after kubectl's fetch of the bare NodeClaim list, timed too, and after kubectl fetching
# the lists status makes, concurrently, as status does (the floor under the same load).
# Past 2,000 pods, RIG_NODE_LEASE_SECONDS (tests/rig/rig) defaults to 300 and
# RIG_KWOK_PARALLELISM to 32: kwok cannot renew thousands of 40 s Leases on two cores, nor give
# thousands of new Nodes and pods their status four at a time, and Nodes lapsing to NotReady or
# waiting on kwok's queue would be measured instead of the agent.
# AGENT_ARGS adds flags to the agent's command line: at 20,000 pods the rig's API server, on the
# same two cores, can miss upstream's 10 s Lease renew deadline, and the agent then exits as
# upstream's does (a Deployment would restart it); AGENT_ARGS=--leader-elect=false measures on.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(15 2000)

# AGENT_BIN measures another build of the agent (e.g. a release build in another target dir).
agent_bin="${AGENT_BIN:-${CARGO_TARGET_DIR:-target}/debug/karpenter-agent}"
[[ -n "${AGENT_BIN:-}" ]] || cargo build --workspace --quiet
bin="$(tests/rig/rig bin | tail -n 1)"
settle_seconds="${SETTLE_SECONDS:-60}"
lease_seconds() {
  if [[ -n "${RIG_NODE_LEASE_SECONDS:-}" ]]; then echo "$RIG_NODE_LEASE_SECONDS"; elif [[ "$1" -gt 2000 ]]; then echo 300; else echo 40; fi
}
kwok_parallelism() {
  if [[ -n "${RIG_KWOK_PARALLELISM:-}" ]]; then echo "$RIG_KWOK_PARALLELISM"; elif [[ "$1" -gt 2000 ]]; then echo 32; else echo 4; fi
}
arrival="${ARRIVAL:-0}"
consolidate_after="${CONSOLIDATE_AFTER:-0s}"

# Small pods when there are many, like a real scale-out; 1 CPU each for the demo size.
pod_cpu() {
  if [[ -n "${POD_CPU:-}" ]]; then echo "$POD_CPU"; elif [[ "$1" -gt 100 ]]; then echo 250m; else echo 1; fi
}
status_bin="${STATUS_BIN:-}"
[[ -n "$status_bin" || ! -x target/release/kubectl-karpenter ]] || status_bin=target/release/kubectl-karpenter

# The scheduler's plan for each scale-down target, computed before any rig runs (the first time,
# cargo builds the benchmark binary).
declare -A plans
declare -A up_plans
for size in "${sizes[@]}"; do
  if [[ "$arrival" -gt 0 ]]; then
    up_plans[$size]="$(cargo bench --quiet --bench disruption -- --plan "${size%%:*}" --cpu "$(pod_cpu "${size%%:*}")" --memory 128Mi | grep '^PLAN ')"
  fi
  [[ "$size" == *:* ]] || continue
  plans[$size]="$(cargo bench --quiet --bench disruption -- --plan "${size#*:}" --cpu "$(pod_cpu "${size%%:*}")" --memory 128Mi | grep '^PLAN ')"
done

# The fleet as one line: each NodeClaim (name, and its deletion timestamp once deleted) and each
# Node, sorted, so any creation or deletion changes it.
fleet_state() {
  {
    "${k[@]}" get nodeclaims -o 'jsonpath={range .items[*]}claim {.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}'
    "${k[@]}" get nodes -l karpenter.sh/nodepool -o 'jsonpath={range .items[*]}node {.metadata.name}{"\n"}{end}'
  } | sort | tr '\n' ';'
}

# The nodes' hourly prices summed, and how many nodes there are.
fleet_price() {
  "${k[@]}" get nodes -l karpenter.sh/nodepool -o json | python3 -c '
import json, sys
nodes = json.load(sys.stdin)["items"]
total = sum(float(n["metadata"]["labels"].get("eks-node-viewer/instance-price", "nan")) for n in nodes)
print(f"{total:.4f} {len(nodes)}")'
}

# Scales inflate to m pods and waits until the fleet settles. Prints the scale-down's start, the
# last change, and the fleet's price and size before and after.
scale_down() {
  local before after since last state previous now running total deleting
  before="$(fleet_price)"
  "${k[@]}" patch nodepool default --type merge -p "{\"spec\":{\"disruption\":{\"consolidateAfter\":\"$consolidate_after\"}}}" >/dev/null
  since=$(date +%s.%N)
  "${k[@]}" scale deployment inflate --replicas "$m" >/dev/null
  last=$since
  previous=""
  while :; do
    now=$(date +%s.%N)
    state="$(fleet_state)"
    if [[ "$state" != "$previous" ]]; then
      previous="$state"
      last=$now
    fi
    # A claim being deleted has a timestamp after its name.
    deleting=$(tr ';' '\n' <<<"$state" | awk '$1 == "claim" && NF > 2' | wc -l)
    running=$("${k[@]}" get pods -l app=inflate --field-selector status.phase=Running --no-headers 2>/dev/null | wc -l)
    total=$("${k[@]}" get pods -l app=inflate --no-headers 2>/dev/null | wc -l)
    if [[ "$deleting" -eq 0 && "$running" -eq "$m" && "$total" -eq "$m" ]] &&
      python3 -c "import sys; sys.exit(0 if $now - $last >= $settle_seconds else 1)"; then
      break
    fi
    if python3 -c "import sys; sys.exit(0 if $now - $since > ${SCALE_DOWN_TIMEOUT:-1800} else 1)"; then
      echo "timeout: the fleet did not settle ($deleting NodeClaims being deleted, $running/$m pods running)" >&2
      break
    fi
    sleep 2
  done
  after="$(fleet_price)"
  echo "$since $last $before $after"
}

for size in "${sizes[@]}"; do
  n="${size%%:*}"
  m=""
  [[ "$size" == *:* ]] && m="${size#*:}"
  dir="$(mktemp -d /tmp/karpenter-scale-XXXXXX)"
  RIG_NODE_LEASE_SECONDS="$(lease_seconds "$n")" RIG_KWOK_PARALLELISM="$(kwok_parallelism "$n")" tests/rig/rig up "$dir" --owner-pid $$ >/dev/null
  k=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")
  "$agent_bin" crds | "${k[@]}" apply --server-side -f - >/dev/null
  "${k[@]}" wait --for condition=Established --timeout 60s crd --all >/dev/null
  "${k[@]}" apply -f examples/kwok/kwoknodeclass.yaml -f examples/kwok/nodepool.yaml -f examples/inflate.yaml >/dev/null
  "${k[@]}" patch nodepool default --type merge -p '{"spec":{"limits":{"cpu":"100000","memory":"100000Gi"}}}' >/dev/null
  if [[ -n "${INSTANCE_TYPES:-}" ]]; then
    types="$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1].split(",")))' "$INSTANCE_TYPES")"
    "${k[@]}" patch nodepool default --type json -p "[{\"op\":\"add\",\"path\":\"/spec/template/spec/requirements/-\",\"value\":{\"key\":\"node.kubernetes.io/instance-type\",\"operator\":\"In\",\"values\":$types}}]" >/dev/null
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # shellcheck disable=SC2086 # AGENT_ARGS is a list of flags.
  "$agent_bin" run --provider kwok --kubeconfig "$dir/kubeconfig" --metrics-address "127.0.0.1:$port" ${AGENT_ARGS:-} >"$dir/agent.log" 2>&1 &
  agent=$!
  sleep 2
  baseline=$(awk '/VmRSS/ {print $2}' "/proc/$agent/status" 2>/dev/null || echo 0)
  cpu="$(pod_cpu "$n")"
  "${k[@]}" set resources deployment inflate --requests "cpu=$cpu,memory=128Mi" >/dev/null
  peak=0
  peak_anon=0
  # The agent's CPU time (user + system, clock ticks) before the scale-out, to say what it used.
  cpu_before=$(awk '{print $14 + $15}' "/proc/$agent/stat" 2>/dev/null || echo 0)
  start=$(date +%s.%N)
  if [[ "$arrival" -gt 0 ]]; then
    for step in $(seq 1 "$arrival"); do
      "${k[@]}" scale deployment inflate --replicas $((n * step / arrival)) >/dev/null
      python3 -c "import time; time.sleep(max(0.0, $start + $step - time.time()))"
    done
  fi
  "${k[@]}" scale deployment inflate --replicas "$n" >/dev/null
  last_scale=$(date +%s.%N)
  sample() {
    # VmHWM is the kernel's own high-water mark: exact, between samples too.
    rss=$(awk '/VmHWM/ {print $2}' "/proc/$agent/status" 2>/dev/null || echo 0)
    anon=$(awk '/RssAnon/ {print $2}' "/proc/$agent/status" 2>/dev/null || echo 0)
    [[ "$rss" -gt "$peak" ]] && peak=$rss
    [[ "$anon" -gt "$peak_anon" ]] && peak_anon=$anon
    return 0
  }
  while :; do
    sample
    running=$("${k[@]}" get pods -l app=inflate --field-selector status.phase=Running --no-headers 2>/dev/null | wc -l)
    [[ "$running" -ge "$n" ]] && break
    elapsed=$(python3 -c "print($(date +%s.%N) - $start)")
    if python3 -c "import sys; sys.exit(0 if $elapsed > ${RUN_TIMEOUT:-600} else 1)"; then echo "timeout: $running/$n running" >&2; break; fi
    # Listing every pod twice a second would load a 2-core rig at 20,000 pods.
    if [[ "$n" -gt 2000 ]]; then sleep 5; else sleep 0.5; fi
  done
  end=$(date +%s.%N)
  cpu_after=$(awk '{print $14 + $15}' "/proc/$agent/stat" 2>/dev/null || echo 0)
  for _ in 1 2 3 4 5 6; do
    sample
    sleep 0.5
  done
  file_rss=$(awk '/RssFile/ {print $2}' "/proc/$agent/status" 2>/dev/null || echo 0)
  settled_rss=$(awk '/VmRSS/ {print $2}' "/proc/$agent/status" 2>/dev/null || echo 0)
  nodes=$("${k[@]}" get nodes --no-headers | wc -l)
  status_line=""
  if [[ -n "$status_bin" ]]; then
    # Three runs; the median wall time, and the plugin's own count of its API calls. Before
    # each, kubectl fetches the same NodeClaim list bare (from the watch cache, as status asks),
    # then all the lists status makes at once: on a loaded rig that is the floor no client can
    # go under, sampled under the same load.
    times=()
    bare=()
    floor=()
    for _ in 1 2 3; do
      t0=$(date +%s%N)
      "${k[@]}" get --raw '/apis/karpenter.sh/v1/nodeclaims?resourceVersion=0' >/dev/null
      bare+=($(( ($(date +%s%N) - t0) / 1000000 )))
      t0=$(date +%s%N)
      lists=()
      for url in '/apis/karpenter.sh/v1/nodepools?resourceVersion=0' '/apis/karpenter.sh/v1/nodeclaims?resourceVersion=0' \
        '/api/v1/nodes?resourceVersion=0' '/api/v1/pods?fieldSelector=spec.nodeName%3D&resourceVersion=0'; do
        "${k[@]}" get --raw "$url" >/dev/null &
        lists+=($!)
      done
      wait "${lists[@]}"
      floor+=($(( ($(date +%s%N) - t0) / 1000000 )))
      t0=$(date +%s%N)
      calls=$("$status_bin" status -v --kubeconfig "$dir/kubeconfig" 2>&1 >/dev/null | grep -o '[0-9]* API calls in [0-9]* ms: .*' | head -n 1 || true)
      times+=($(( ($(date +%s%N) - t0) / 1000000 )))
    done
    median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 2p)
    bare_median=$(printf '%s\n' "${bare[@]}" | sort -n | sed -n 2p)
    floor_median=$(printf '%s\n' "${floor[@]}" | sort -n | sed -n 2p)
    not_ready=$("${k[@]}" get nodes --no-headers | awk '$2 != "Ready"' | wc -l)
    status_line="status: median ${median} ms over 3 runs (${times[*]} ms); ${calls:-no API call count printed}
the NodeClaim list alone (kubectl get --raw, just before each status): median ${bare_median} ms (${bare[*]} ms)
the lists status makes, by kubectl concurrently (Nodes as JSON, status asks protobuf): median ${floor_median} ms (${floor[*]} ms)
nodes not Ready when status ran: ${not_ready} (Node Leases of $(lease_seconds "$n") s, kwok parallelism $(kwok_parallelism "$n"))"
  fi
  metrics=$(curl -s "http://127.0.0.1:$port/metrics" 2>/dev/null || python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$port/metrics').read().decode())")
  claims=$("${k[@]}" get nodeclaims --no-headers | wc -l)
  up_price="$(fleet_price)"
  # When the ReplicaSet created the last pod (its creationTimestamp, whole seconds).
  last_created=$("${k[@]}" get pods -l app=inflate -o json | python3 -c '
import json, sys, datetime
pods = json.load(sys.stdin)["items"]
print(max(datetime.datetime.fromisoformat(p["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp() for p in pods))')
  # The kube-scheduler's side of the arrival, from its Events: when it first found each pod
  # unschedulable (FailedScheduling, what the agent waits for) and when it bound it (Scheduled).
  verdicts=""
  if [[ "$arrival" -gt 0 ]]; then
    verdicts="$("${k[@]}" get pods -l app=inflate -o json >"$dir/pods.json"
      "${k[@]}" get events --field-selector involvedObject.kind=Pod -o json | python3 -c '
import json, sys, datetime
def t(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() if s else None
created = {p["metadata"]["uid"]: t(p["metadata"]["creationTimestamp"]) for p in json.load(open(sys.argv[1]))["items"]}
first = {}
for e in json.load(sys.stdin)["items"]:
    uid = e["involvedObject"].get("uid")
    at = t(e.get("eventTime") or e.get("firstTimestamp"))
    if uid in created and at and e["reason"] in ("FailedScheduling", "Scheduled"):
        key = (uid, e["reason"])
        first[key] = min(at, first.get(key, at))
lag = sorted(first[(u, "FailedScheduling")] - c for u, c in created.items() if (u, "FailedScheduling") in first)
last = max(created.values())
q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
verdicts = [first[(u, "FailedScheduling")] for u in created if (u, "FailedScheduling") in first]
bound = [first[(u, "Scheduled")] for u in created if (u, "Scheduled") in first]
print(f"kube-scheduler: {len(lag)} pods found unschedulable, p50 {q(lag, 0.5):.1f}s p99 {q(lag, 0.99):.1f}s after "
      f"their creation; the last verdict {max(verdicts, default=last) - last:.1f}s and the last binding "
      f"{max(bound, default=last) - last:.1f}s after the last pod\x27s creation")' "$dir/pods.json")"
  fi
  cpu_line="$(python3 -c "
ticks = ($cpu_after - $cpu_before) / $(getconf CLK_TCK)
print(f'agent CPU over the scale-up: {ticks:.0f} s (user + system), '
      f'{100 * ticks / max(1e-9, $end - $start):.0f} % of one core')")"
  down=""
  [[ -z "$m" ]] || down="$(scale_down)"
  kill "$agent"; wait "$agent" 2>/dev/null || true
  [[ -n "${KEEP_SCALE_LOGS:-}" ]] && cp "$dir/agent.log" "/tmp/agent-scale-$n.log"
  # Each round's wall time from the agent's log: sync, input and solve (the creates run while
  # the next batch fills, and are timed on their own line).
  rounds_line="$(python3 - "$dir/agent.log" <<'PY'
import re, sys
rounds, creates = [], []
for line in open(sys.argv[1], errors="replace"):
    fields = dict(re.findall(r'(\w+)=([0-9.]+)', line))
    if "scheduling round" in line and "elapsed_ms" in fields:
        rounds.append(float(fields["elapsed_ms"]))
    elif "created the round" in line and "create_ms" in fields:
        creates.append(float(fields["create_ms"]))
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] / 1000 if xs else float("nan")
if rounds:
    print(f"round wall time (agent log): {len(rounds)} rounds, p50 {q(rounds, .5):.2f}s p90 {q(rounds, .9):.2f}s "
          f"p99 {q(rounds, .99):.2f}s max {max(rounds) / 1000:.2f}s, {sum(r > 1000 for r in rounds)} over 1 s; "
          f"creates per round: p50 {q(creates, .5):.2f}s p90 {q(creates, .9):.2f}s p99 {q(creates, .99):.2f}s")
PY
)"
  tests/rig/rig down "$dir" --purge >/dev/null
  python3 - "$n" "$start" "$end" "$peak" "$claims" "$peak_anon" "$file_rss" "$baseline" "$settled_rss" "$nodes" <<PY
import sys, re
n, start, end, peak, claims = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
peak_anon, file_rss = int(sys.argv[6]), int(sys.argv[7])
baseline, settled, nodes = int(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10])
text = """$metrics"""
rounds = [(float(m.group(1)), int(m.group(2))) for m in re.finditer(
    r'karpenter_scheduler_scheduling_duration_seconds_bucket\{le="([^"]+)",controller="provisioner"\} (\d+)', text)]
rounds_sum = re.search(r'karpenter_scheduler_scheduling_duration_seconds_sum\{controller="provisioner"\} ([0-9.e+-]+)', text)
rounds_n = rounds[-1][1] if rounds else 0
def bucket(q):
    for le, c in rounds:
        if rounds_n and c >= q * rounds_n:
            return le
    return float("nan")
slowest = next((le for le, c in rounds if c == rounds_n), float("nan"))
if rounds_n:
    print(f"scheduling rounds: {rounds_n}, mean {float(rounds_sum.group(1)) / rounds_n:.3f}s, "
          f"p50<={bucket(0.5)}s p99<={bucket(0.99)}s slowest<={slowest}s")
per_object = (settled - baseline) / max(1, n + nodes + claims)
print(f"agent RSS: {baseline/1024:.1f} MiB before the scale-out, {settled/1024:.1f} MiB with {n} pods, "
      f"{nodes} nodes and {claims} NodeClaims cached (~{per_object:.2f} KiB an object), peak {peak/1024:.1f} MiB")
buckets = []
for line in text.splitlines():
    m = re.match(r'karpenter_pods_unschedulable_to_nodeclaim_seconds_bucket\{le="([^"]+)"\} (\d+)', line)
    if m:
        buckets.append((float(m.group(1)), int(m.group(2))))
count = buckets[-1][1] if buckets else 0
decisions = [(float(m.group(1)), int(m.group(2))) for m in re.finditer(
    r'karpenter_pods_scheduling_decision_duration_seconds_bucket\{le="([^"]+)"\} (\d+)', text)]
decided = decisions[-1][1] if decisions else 0
def decision(q):
    return next((le for le, c in decisions if decided and c >= q * decided), float("nan"))
batches = dict(re.findall(r'karpenter_provisioner_batches_total\{closed_by="([a-z]+)"\} (\d+)', text))
def quantile(q):
    for le, c in buckets:
        if count and c >= q * count:
            return le
    return float("nan")
print(f"pods={n:5d}  all running after {end-start:6.1f}s  nodeclaims={claims:4d}  "
      f"unschedulable->decision p50<={decision(0.5)}s p99<={decision(0.99)}s (n={decided})  "
      f"unschedulable->new nodeclaim p50<={quantile(0.5)}s p99<={quantile(0.99)}s (n={count})  agent peak RSS={peak/1024:.1f} MiB "
      f"(heap/anon peak {peak_anon/1024:.1f} MiB, mapped binary {file_rss/1024:.1f} MiB)  "
      f"batches closed by {', '.join(f'{k} {v}' for k, v in sorted(batches.items())) or 'none'}")
PY
  [[ -z "$rounds_line" ]] || echo "$rounds_line"
  echo "$cpu_line"
  [[ -z "$status_line" ]] || echo "$status_line"
  [[ -z "$verdicts" ]] || echo "$verdicts"
  if [[ "$arrival" -gt 0 ]]; then
    python3 - "$n" "$arrival" "$last_created" "$end" "$up_price" "${up_plans[$size]}" <<'PY'
import sys
n, arrival, last, end = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
price, nodes = float(sys.argv[5].split()[0]), int(sys.argv[5].split()[1])
fields = dict(f.split("=", 1) for f in sys.argv[6].split()[1:])
planned, planned_nodes = float(fields["price"]), int(fields["nodes"])
print(f"arrival over {arrival}s: every pod running {end - last:.1f}s after the last pod's creation (to the second); "
      f"fleet ${price:.4f}/h on {nodes} nodes; the scheduler's one-shot plan for {n} pods: "
      f"${planned:.4f}/h on {planned_nodes} nodes; fleet/plan = {price / planned:.3f}")
PY
  fi
  [[ -n "$m" ]] || continue
  python3 - "$n" "$m" "$down" "${plans[$size]}" <<'PY'
import sys
n, m, down, plan = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
since, last = float(down[0]), float(down[1])
before, before_nodes, after, after_nodes = float(down[2]), int(down[3]), float(down[4]), int(down[5])
fields = dict(f.split("=", 1) for f in plan.split()[1:])
planned, planned_nodes = float(fields["price"]), int(fields["nodes"])
print(f"scale-down {n}->{m} pods: settled {last - since:.1f}s after the scale-down (its last NodeClaim/Node change); "
      f"fleet ${before:.4f}/h on {before_nodes} nodes -> ${after:.4f}/h on {after_nodes} nodes; "
      f"the scheduler's plan for {m} pods from scratch: ${planned:.4f}/h on {planned_nodes} nodes ({fields['types']}); "
      f"settled/plan = {after / planned:.3f}")
PY
done
