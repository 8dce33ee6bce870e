#!/usr/bin/env bash
# Chaos on the rig with the kwok provider, the agent run as in a cluster: REPLICAS replicas
# (default 2) with leader election, and a pool that consolidates (consolidateAfter 10s). A
# scale-out of PODS pods (default 200) is added in KILLS steps (default 20), while the leader
# (the Lease's holder) is killed with SIGKILL at a random moment of each step (0.2 to 3 s after
# the step's pods, a ready replica leading) and another replica started in its place; after
# half the steps the API server is stopped for OUTAGE seconds (default 60; 0 skips it) while the
# agents run, then started again (with the controller manager, scheduler and kwok, which exit
# when they cannot renew their leases). Then the workload shrinks to half, and the leader is
# killed each time a node carries the `karpenter.sh/disrupted` taint (in the middle of a
# consolidation), up to MID_KILLS times (default 5).
#
# Then it waits for the fleet to settle and checks what a user would: every pod Running; one
# Node per NodeClaim and one NodeClaim per Node (no instance without a claim, no claim whose
# instance was made twice); no NodeClaim without a pod on it; no node left with the disruption
# taint unless its claim is being deleted; no panic in the agents' log. Prints the figures;
# exits 1 if a check fails. A script, not a test: its timings are figures.
#
# Usage: tests/kwok/chaos.sh
# Environment: AGENT_BIN (default: the debug build, built first), PODS, KILLS, OUTAGE, MID_KILLS,
# REPLICAS, LEADER_ELECT (default true; false runs one replica that acts alone, so a restarted
# agent acts at once instead of waiting out the dead one's Lease, which puts more of the kills
# in the middle of launches), KEEP_CHAOS_LOGS=1 keeps the agents' log as /tmp/agent-chaos.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
pods="${PODS:-200}"
kills="${KILLS:-20}"
outage="${OUTAGE:-60}"
mid_kills="${MID_KILLS:-5}"
export LEADER_ELECT="${LEADER_ELECT:-true}"
replicas="${REPLICAS:-2}"
# Without leader election every replica would act: one alone.
[[ "$LEADER_ELECT" == true ]] || replicas=1

agent_bin="${AGENT_BIN:-${CARGO_TARGET_DIR:-target}/debug/karpenter-agent}"
[[ -n "${AGENT_BIN:-}" ]] || cargo build --quiet -p karpenter-agent
bin="$(tests/rig/rig bin | tail -n 1)"
dir="$(mktemp -d /tmp/karpenter-chaos-XXXXXX)"
tests/rig/rig up "$dir" --owner-pid $$ >/dev/null
k=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")

"$agent_bin" crds | "${k[@]}" apply --server-side -f - >/dev/null
"${k[@]}" wait --for condition=Established --timeout 60s crd --all >/dev/null
"${k[@]}" apply -f examples/kwok/kwoknodeclass.yaml -f examples/kwok/nodepool.yaml -f examples/inflate.yaml >/dev/null
"${k[@]}" patch nodepool default --type merge -p '{"spec":{"limits":{"cpu":"100000","memory":"100000Gi"},"disruption":{"consolidationPolicy":"WhenEmptyOrUnderutilized","consolidateAfter":"10s","budgets":[{"nodes":"20%"}]}}}' >/dev/null
"${k[@]}" set resources deployment inflate --requests "cpu=500m,memory=128Mi" >/dev/null

log="$dir/agent.log"
declare -A pids ports
started_replicas=0
start_replica() {
  started_replicas=$((started_replicas + 1))
  local name="chaos-$started_replicas" port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  POD_NAME="$name" "$agent_bin" run --provider kwok --kubeconfig "$dir/kubeconfig" --metrics-address "127.0.0.1:$port" \
    --leader-election-namespace default >>"$log" 2>&1 &
  pids[$name]=$!
  ports[$name]=$port
}
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
}
trap 'stop_all' EXIT
# The replica that acts: the Lease's holder (its identity is POD_NAME_<suffix>), or the only one
# without leader election.
leader() {
  if [[ "$LEADER_ELECT" == true ]]; then
    local identity
    identity="$("${k[@]}" -n default get lease karpenter-leader-election -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
    echo "${identity%%_*}"
  else
    echo "${!pids[@]}" | awk '{print $1}'
  fi
}
# SIGKILLs the leader and starts another replica in its place; fails when none leads.
kill_leader() {
  local name
  name="$(leader)"
  [[ -n "$name" && -n "${pids[$name]:-}" ]] || return 1
  kill -KILL "${pids[$name]}" 2>/dev/null || true
  wait "${pids[$name]}" 2>/dev/null || true
  unset "pids[$name]" "ports[$name]"
  start_replica
}
for _ in $(seq 1 "$replicas"); do start_replica; done

count() { "${k[@]}" "$@" --no-headers 2>/dev/null | wc -l; }
running_pods() { count get pods -l app=inflate --field-selector status.phase=Running; }

started=$(date +%s.%N)
step=$(((pods + kills - 1) / kills))
scaled=0
killed=0
outage_at=$((kills / 2))
# Led: a live replica holds the Lease and has listed the cluster (a kill before that tests
# start-up only).
wait_led() {
  local until=$(($(date +%s) + 180)) name
  while :; do
    name="$(leader)"
    if [[ -n "$name" && -n "${ports[$name]:-}" ]] &&
      python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:${ports[$name]}/readyz', timeout=2).status == 200 else 1)" 2>/dev/null; then
      return 0
    fi
    [[ $(date +%s) -lt $until ]] || { echo "no replica came to lead" >&2; return 1; }
    sleep 0.2
  done
}
for i in $(seq 1 "$kills"); do
  wait_led
  scaled=$((scaled + step > pods ? pods : scaled + step))
  "${k[@]}" scale deployment inflate --replicas "$scaled" >/dev/null
  sleep "$(python3 -c 'import random; print(round(random.uniform(0.2, 3.0), 2))')"
  kill_leader && killed=$((killed + 1))
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

# Half the pods go: consolidation removes and replaces nodes; the leader is killed each time a
# node carries the disruption taint.
kept=$((pods / 2))
"${k[@]}" scale deployment inflate --replicas "$kept" >/dev/null
mid_killed=0
mid_deadline=$(($(date +%s) + 300))
while [[ "$mid_killed" -lt "$mid_kills" && $(date +%s) -lt $mid_deadline ]]; do
  wait_led
  if "${k[@]}" get nodes -o jsonpath='{range .items[*]}{.spec.taints[*].key}{"\n"}{end}' 2>/dev/null | grep -q 'karpenter.sh/disrupted'; then
    kill_leader && mid_killed=$((mid_killed + 1))
  fi
  sleep 0.2
done

# The fleet as the checks read it: each claim's providerID, and each Karpenter Node's.
fleet() {
  "${k[@]}" get nodeclaims -o json | python3 -c '
import json, sys
for c in json.load(sys.stdin)["items"]:
    print("claim", c["metadata"]["name"], c.get("status", {}).get("providerID", "-"), c.get("status", {}).get("nodeName", "-"),
          "deleting" if c["metadata"].get("deletionTimestamp") else "live")'
  "${k[@]}" get nodes -l karpenter.sh/nodepool -o json | python3 -c '
import json, sys
for n in json.load(sys.stdin)["items"]:
    tainted = any(t["key"] == "karpenter.sh/disrupted" for t in n.get("spec", {}).get("taints", []) or [])
    print("node", n["metadata"]["name"], n.get("spec", {}).get("providerID", "-"), "tainted" if tainted else "clean")'
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
claims, nodes, pods, deleting, tainted = {}, {}, [], set(), set()
for line in sys.stdin:
    f = line.split()
    if f[0] == "claim": claims[f[1]] = (f[2], f[3]); deleting = deleting if f[4] == "live" else deleting | {f[1]}
    elif f[0] == "node": nodes[f[1]] = f[2]; tainted = tainted | ({f[1]} if f[3] == "tainted" else set())
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
for name in tainted:
    owners = [c for c, (pid, _) in claims.items() if pid == nodes[name]]
    if not any(c in deleting for c in owners): print("stranded-taint", name)
'
}

# Garbage collection removes a node whose claim was never written (the agent died between the
# two) after its grace period, and consolidation the nodes the shrink emptied: wait for the
# fleet to have no problem, or for 10 minutes.
settle_deadline=$(($(date +%s) + 600))
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
stop_all
trap - EXIT
[[ -n "${KEEP_CHAOS_LOGS:-}" ]] && cp "$log" /tmp/agent-chaos.log
tests/rig/rig down "$dir" --purge >/dev/null

python3 - "$started" "$all_running" "$settled" <<PY
import sys
started, running, settled = map(float, sys.argv[1:])
print(f"chaos: {$pods} pods in {$kills} steps, {$replicas} replicas (leader election $LEADER_ELECT), the leader killed {$killed} times (SIGKILL), "
      f"API server stopped {$outage}s after step {$outage_at}; all pods running {running - started:.1f}s after the first step; "
      f"scaled to {$kept} with the leader killed {$mid_killed} times mid-consolidation; "
      f"fleet settled {settled - running:.1f}s later: {$claims} NodeClaims, {$nodes} Nodes, {$panics} panics in the agents' log")
PY
if [[ -n "$found" || "$panics" -gt 0 ]]; then
  echo "FAILED checks:" >&2
  sed 's/^/  /' <<<"$found" >&2
  exit 1
fi
echo "checks passed: every pod Running, one Node per NodeClaim and one NodeClaim per Node, no NodeClaim without pods, no stranded taint, no panic"
