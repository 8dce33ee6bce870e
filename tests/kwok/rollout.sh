#!/usr/bin/env bash
# A drift roll-out on the rig with the kwok provider, once per disruption budget: NODES nodes
# (default 20), one pod each (required anti-affinity on the hostname), a pool whose budget is
# `nodes: B`; the pool's template label is changed so every node drifts, and the script times
# until every pod runs on a node of the new template and no old node is left. It also samples,
# every second, how many nodes carry the `karpenter.sh/disrupted` taint, so the figure shows
# whether the commands ran side by side up to the budget.
#
# Usage: tests/kwok/rollout.sh [BUDGET...]        (default: 1 5)
# Environment: AGENT_BIN (default: the debug build, built first), NODES, DELAY (the kwok node
# class's nodeRegistrationDelay, default 10s: a launch that takes time, as a cloud's does).
# A script, not a test: its timings are figures.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
budgets=("$@")
[[ ${#budgets[@]} -gt 0 ]] || budgets=(1 5)
nodes="${NODES:-20}"
delay="${DELAY:-10s}"
export LEADER_ELECT=false

agent_bin="${AGENT_BIN:-${CARGO_TARGET_DIR:-target}/debug/karpenter-agent}"
[[ -n "${AGENT_BIN:-}" ]] || cargo build --quiet -p karpenter-agent
bin="$(tests/rig/rig bin | tail -n 1)"
dir="$(mktemp -d /tmp/karpenter-rollout-XXXXXX)"
tests/rig/rig up "$dir" --owner-pid $$ >/dev/null
k=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")

"$agent_bin" crds | "${k[@]}" apply --server-side -f - >/dev/null
"${k[@]}" wait --for condition=Established --timeout 60s crd --all >/dev/null
"${k[@]}" apply -f - >/dev/null <<EOF
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
spec: {nodeRegistrationDelay: $delay}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: rollout}
spec:
  template:
    metadata: {labels: {rollout: v0}}
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: Never
    budgets: [{nodes: "1"}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread, namespace: default}
spec:
  replicas: $nodes
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {karpenter.sh/nodepool: rollout}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: spread}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {requests: {cpu: 500m, memory: 128Mi}}
EOF

log="$dir/agent.log"
"$agent_bin" run --provider kwok --kubeconfig "$dir/kubeconfig" --metrics-address 127.0.0.1:0 >>"$log" 2>&1 &
agent=$!
trap 'kill -KILL "$agent" 2>/dev/null || true' EXIT

# How many pods run on nodes labelled rollout=$1, and how many Karpenter nodes lack that label.
on_version() {
  "${k[@]}" get nodes -l karpenter.sh/nodepool=rollout -o json | python3 -c '
import json, sys
want = sys.argv[1]
nodes = json.load(sys.stdin)["items"]
old = [n for n in nodes if n["metadata"]["labels"].get("rollout") != want]
tainted = [n for n in nodes if any(t["key"] == "karpenter.sh/disrupted" for t in n.get("spec", {}).get("taints", []) or [])]
print(len(old), len(tainted), " ".join(n["metadata"]["name"] for n in nodes if n["metadata"]["labels"].get("rollout") == want))' "$1"
}
running_on() {
  local fresh=" $1 "
  "${k[@]}" get pods -l app=spread --field-selector status.phase=Running -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' |
    python3 -c 'import sys; fresh = set(sys.argv[1].split()); print(sum(1 for l in sys.stdin if l.strip() in fresh))' "$1"
}

# Waits until every pod runs on a node labelled rollout=$1 and no other node is left; prints
# "SECONDS MAX_TAINTED".
settle_on() {
  local version=$1 started=$2 max=0 deadline=$(($(date +%s) + 1800))
  while :; do
    read -r old tainted fresh < <(on_version "$version")
    ((tainted > max)) && max=$tainted
    if [[ "$old" -eq 0 && "$(running_on "$fresh")" -ge "$nodes" ]]; then
      break
    fi
    if [[ $(date +%s) -gt $deadline ]]; then
      echo "timeout waiting for version $version: $old old nodes left" >&2
      tail -n 50 "$log" >&2
      exit 1
    fi
    sleep 1
  done
  python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.0f} {sys.argv[2]}')" "$started" "$max"
}

started=$(date +%s.%N)
read -r took _ < <(settle_on v0 "$started")
echo "rollout: $nodes nodes up in ${took}s (nodeRegistrationDelay $delay)"
version=0
for budget in "${budgets[@]}"; do
  version=$((version + 1))
  "${k[@]}" patch nodepool rollout --type merge \
    -p "{\"spec\":{\"disruption\":{\"budgets\":[{\"nodes\":\"$budget\"}]},\"template\":{\"metadata\":{\"labels\":{\"rollout\":\"v$version\"}}}}}" >/dev/null
  started=$(date +%s.%N)
  read -r took max < <(settle_on "v$version" "$started")
  echo "rollout: budget nodes=$budget: $nodes drifted nodes replaced in ${took}s, at most $max disrupting at once"
done
panics=$(grep -c 'panicked' "$log" || true)
kill -KILL "$agent" 2>/dev/null || true
trap - EXIT
tests/rig/rig down "$dir" --purge >/dev/null
[[ "$panics" -eq 0 ]] || { echo "$panics panics in the agent log" >&2; exit 1; }
