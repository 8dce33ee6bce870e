#!/usr/bin/env bash
# Chaos on the rig with the kwok provider: a scale-out of PODS pods (default 200), added in
# KILLS steps (default 20), while the agent is killed with SIGKILL at a random moment of each step
# (0.2 to 3 s after the step's pods, the agent being ready) and started again at once; after half the steps the API server is stopped for
# OUTAGE seconds (default 60; 0 skips it) while the agent runs, then started again (with the
# controller manager, scheduler and kwok, which exit when they cannot renew their leases).
#
# Then it waits for every pod to run and for garbage collection, and checks what a user would:
# every pod Running; one Node per NodeClaim and one NodeClaim per Node (no instance without a
# claim, no claim whose instance was made twice); no NodeClaim without a pod on it (the pool's
# consolidateAfter is Never, so nothing hides an extra node); no panic in the agent's log.
# Prints the figures; exits 1 if a check fails. A script, not a test: its timings are figures.
#
# Usage: tests/kwok/chaos.sh
# Environment: AGENT_BIN (default: the debug build, built first), PODS, KILLS, OUTAGE,
# LEADER_ELECT (default false: a restarted agent acts at once instead of waiting out the dead
# one's Lease, which puts more of the kills in the middle of launches), KEEP_CHAOS_LOGS=1 keeps
# the agent's log as /tmp/agent-chaos.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
pods="${PODS:-200}"
kills="${KILLS:-20}"
outage="${OUTAGE:-60}"
export LEADER_ELECT="${LEADER_ELECT:-false}"

agent_bin="${AGENT_BIN:-${CARGO_TARGET_DIR:-target}/debug/karpenter-agent}"
[[ -n "${AGENT_BIN:-}" ]] || cargo build --quiet -p karpenter-agent
bin="$(tests/rig/rig bin | tail -n 1)"
dir="$(mktemp -d /tmp/karpenter-chaos-XXXXXX)"
tests/rig/rig up "$dir" --owner-pid $$ >/dev/null
k=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")

"$agent_bin" crds | "${k[@]}" apply --server-side -f - >/dev/null
"${k[@]}" wait --for condition=Established --timeout 60s crd --all >/dev/null
"${k[@]}" apply -f examples/kwok/kwoknodeclass.yaml -f examples/kwok/nodepool.yaml -f examples/inflate.yaml >/dev/null
"${k[@]}" patch nodepool default --type merge -p '{"spec":{"limits":{"cpu":"100000","memory":"100000Gi"},"disruption":{"consolidateAfter":"Never"}}}' >/dev/null
"${k[@]}" set resources deployment inflate --requests "cpu=500m,memory=128Mi" >/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log="$dir/agent.log"
agent=""
start_agent() {
  "$agent_bin" run --provider kwok --kubeconfig "$dir/kubeconfig" --metrics-address "127.0.0.1:$port" >>"$log" 2>&1 &
  agent=$!
}
stop_agent() {
  kill -KILL "$agent" 2>/dev/null || true
  wait "$agent" 2>/dev/null || true
}
trap 'stop_agent' EXIT

count() { "${k[@]}" "$@" --no-headers 2>/dev/null | wc -l; }
running_pods() { count get pods -l app=inflate --field-selector status.phase=Running; }

start_agent
started=$(date +%s.%N)
step=$(((pods + kills - 1) / kills))
replicas=0
killed=0
outage_at=$((kills / 2))
# Ready: the agent has listed the cluster and works (a kill before that tests start-up only).
wait_ready() {
  local until=$(($(date +%s) + 120))
  until python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$port/readyz', timeout=2).status == 200 else 1)" 2>/dev/null; do
    [[ $(date +%s) -lt $until ]] || { echo "the agent did not become ready" >&2; return 1; }
    sleep 0.2
  done
}
for i in $(seq 1 "$kills"); do
  wait_ready
  replicas=$((replicas + step > pods ? pods : replicas + step))
  "${k[@]}" scale deployment inflate --replicas "$replicas" >/dev/null
  sleep "$(python3 -c 'import random; print(round(random.uniform(0.2, 3.0), 2))')"
  stop_agent
  killed=$((killed + 1))
  start_agent
  if [[ "$outage" -gt 0 && "$i" -eq "$outage_at" ]]; then
    sleep 2
    tests/rig/rig stop "$dir" kube-apiserver 2>/dev/null
    sleep "$outage"
    tests/rig/rig start "$dir" kube-apiserver 2>/dev/null
    for component in kube-controller-manager kube-scheduler kwok; do
      tests/rig/rig start "$dir" "$component" 2>/dev/null
    done
  fi
done

deadline=$(($(date +%s) + 900))
until [[ "$(running_pods)" -ge "$pods" ]]; do
  if [[ $(date +%s) -gt $deadline ]]; then
    echo "timeout: $(running_pods)/$pods pods running" >&2
    break
  fi
  sleep 1
done
all_running=$(date +%s.%N)

# The fleet as the checks read it: each claim's providerID, and each Karpenter Node's.
fleet() {
  "${k[@]}" get nodeclaims -o json | python3 -c '
import json, sys
for c in json.load(sys.stdin)["items"]:
    print("claim", c["metadata"]["name"], c.get("status", {}).get("providerID", "-"), c.get("status", {}).get("nodeName", "-"))'
  "${k[@]}" get nodes -l karpenter.sh/nodepool -o json | python3 -c '
import json, sys
for n in json.load(sys.stdin)["items"]:
    print("node", n["metadata"]["name"], n.get("spec", {}).get("providerID", "-"))'
  "${k[@]}" get pods -l app=inflate -o json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    print("pod", p["metadata"]["name"], p["spec"].get("nodeName", "-"), p["status"].get("phase", "-"))'
}

# Problems, one per line: nodes without a claim, claims without a node or with two, claims
# with no pod on their node, pods not running.
problems() {
  python3 -c '
import sys, collections
claims, nodes, pods = {}, {}, []
for line in sys.stdin:
    f = line.split()
    if f[0] == "claim": claims[f[1]] = (f[2], f[3])
    elif f[0] == "node": nodes[f[1]] = f[2]
    elif f[0] == "pod": pods.append((f[1], f[2], f[3]))
by_provider = collections.Counter(nodes.values())
claim_providers = collections.Counter(p for p, _ in claims.values())
for name, pid in nodes.items():
    if claim_providers[pid] == 0: print("node-without-claim", name)
for name, (pid, node) in claims.items():
    if by_provider[pid] == 0: print("claim-without-node", name)
    if by_provider[pid] > 1 or claim_providers[pid] > 1: print("instance-made-twice", name, pid)
used = collections.Counter(node for _, node, _ in pods)
for name, (pid, node) in claims.items():
    hosted = [n for n, p in nodes.items() if p == pid]
    if hosted and not any(used[n] for n in hosted): print("claim-without-pods", name)
for name, node, phase in pods:
    if phase != "Running": print("pod-not-running", name, phase)
'
}

# Garbage collection removes a node whose claim was never written (the agent died between the
# two) after its grace period: wait for the fleet to have no problem, or for 5 minutes.
settle_deadline=$(($(date +%s) + 300))
while :; do
  state="$(fleet)"
  found="$(problems <<<"$state")"
  [[ -z "$found" ]] && break
  [[ $(date +%s) -gt $settle_deadline ]] && break
  sleep 5
done
settled=$(date +%s.%N)
claims=$(grep -c '^claim ' <<<"$state" || true)
nodes=$(grep -c '^node ' <<<"$state" || true)
panics=$(grep -c 'panicked' "$log" || true)
stop_agent
trap - EXIT
[[ -n "${KEEP_CHAOS_LOGS:-}" ]] && cp "$log" /tmp/agent-chaos.log
tests/rig/rig down "$dir" --purge >/dev/null

python3 - "$started" "$all_running" "$settled" <<PY
import sys
started, running, settled = map(float, sys.argv[1:])
print(f"chaos: {$pods} pods in {$kills} steps, agent killed {$killed} times (SIGKILL), "
      f"API server stopped {$outage}s after step {$outage_at}; all pods running {running - started:.1f}s after the first step; "
      f"fleet settled {settled - running:.1f}s later: {$claims} NodeClaims, {$nodes} Nodes, {$panics} panics in the agent log")
PY
if [[ -n "$found" || "$panics" -gt 0 ]]; then
  echo "FAILED checks:" >&2
  sed 's/^/  /' <<<"$found" >&2
  exit 1
fi
echo "checks passed: every pod Running, one Node per NodeClaim and one NodeClaim per Node, no NodeClaim without pods, no panic"
