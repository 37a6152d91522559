#!/usr/bin/env bash
# A restart of the server while a Function is being called and a workflow runs: afterwards the
# Function is still deployed (same revision, no new one), answers, scales to zero and comes
# back from zero on the next call, as before the restart; the workflow run resumes from its
# stored status and ends with the right output, its first Task not run again; and
# `kubectl fn run`, `kubectl get workflowruns` and `kubectl fn graph --run` work on it. Runs against the cluster hack/up.sh started (the one
# in $MINIK8S_DATA_DIR), restarting it with hack/up.sh. Calls that fail while the server is
# down are counted and printed; every call after it is back must succeed.
source "$(dirname "$0")/lib.sh"

export KUBECONFIG="$DATA_DIR/admin.kubeconfig"
NS="e2e-fn-$$"
WORK="$(mktemp -d)"
cleanup() {
  if [[ -n "${LOAD_PID:-}" ]]; then kill "$LOAD_PID" 2>/dev/null || true; fi
  kubectl delete ns "$NS" --wait=false >/dev/null 2>&1 || true
  kubectl -n knative-serving delete configmap config-autoscaler >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { log "FAIL: $*"; exit 1; }

kubectl create ns "$NS" >/dev/null
kubectl create ns knative-serving >/dev/null 2>&1 || true
kubectl -n knative-serving create configmap config-autoscaler \
  --from-literal=stable-window=6s --from-literal=scale-to-zero-grace-period=2s \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
cat >"$WORK/handler.py" <<'PY'
def handle(body):
    return {"n": body.get("n", 0) + 1}
PY
kubectl fn -n "$NS" deploy counter --from-file "$WORK/handler.py" >/dev/null
URL="http://127.0.0.1:8080/function/counter.$NS"
call() { curl -s -m 30 -o "$WORK/body" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"n": 41}' "$URL"; }
wait_for 60 sh -c "kubectl -n $NS get pods -l functions.minik8s.io/pool=python3 -o jsonpath='{.items[*].status.conditions[?(@.type==\"Ready\")].status}' | grep -q True" ||
  fail "no warm pool pod"
[[ "$(call)" == 200 && "$(cat "$WORK/body")" == '{"n": 42}' ]] || fail "first call: $(cat "$WORK/body")"

log "a workflow that waits between two calls of the function"
kubectl -n "$NS" apply -f - >/dev/null <<'YAML'
apiVersion: functions.minik8s.io/v1alpha1
kind: Workflow
metadata:
  name: twice
spec:
  definition:
    StartAt: First
    States:
      First: {Type: Task, Resource: counter, Next: Pause}
      Pause: {Type: Wait, Seconds: 6, Next: Second}
      Second: {Type: Task, Resource: counter, End: true}
YAML
[[ "$(kubectl fn -n "$NS" run twice --input '{"n": 1}' --timeout 60s)" == '{"n":3}' ]] ||
  fail "kubectl fn run twice did not print its output"
RUN="$(kubectl fn -n "$NS" run twice --input '{"n": 40}' --async | sed 's|.*/||; s| created||')"
wait_for 30 sh -c "kubectl -n $NS get wfr $RUN -o jsonpath='{.status.history[*].state}' | grep -q Pause" ||
  fail "the run $RUN never reached Pause"

log "calling the function while the server restarts"
(while :; do call >>"$WORK/codes" || true; echo >>"$WORK/codes"; done) &
LOAD_PID=$!
"$REPO_ROOT/hack/up.sh" >/dev/null
wait_for 60 sh -c "[ \"\$(curl -s -m 5 -o /dev/null -w '%{http_code}' -d '{}' $URL)\" = 200 ]" ||
  fail "the function does not answer after the restart"
kill "$LOAD_PID" || true; LOAD_PID=
log "calls while the server was down: $(grep -c . "$WORK/codes" || true), of them not 200: $(grep -vc '^200$' "$WORK/codes" || true)"
for _ in $(seq 1 40); do [[ "$(call)" == 200 ]] || fail "a call after the restart: $(cat "$WORK/body")"; done

revisions="$(kubectl -n "$NS" get revisions -o name | tr '\n' ' ')"
[[ "$revisions" == "revision.serving.knative.dev/counter-00001 " ]] || fail "revisions after the restart: $revisions"
kubectl -n "$NS" wait fn/counter --for=condition=Ready --timeout=30s >/dev/null || fail "not Ready after the restart"

log "the workflow run resumes after the restart"
kubectl -n "$NS" wait "wfr/$RUN" --for=jsonpath='{.status.phase}'=Succeeded --timeout=90s >/dev/null ||
  fail "run $RUN: $(kubectl -n "$NS" get wfr "$RUN" -o jsonpath='{.status.phase} {.status.error} {.status.cause}')"
[[ "$(kubectl -n "$NS" get wfr "$RUN" -o jsonpath='{.status.output}')" == '{"n":42}' ]] ||
  fail "run $RUN output: $(kubectl -n "$NS" get wfr "$RUN" -o jsonpath='{.status.output}')"
firsts="$(kubectl -n "$NS" get wfr "$RUN" -o jsonpath='{range .status.history[?(@.type=="StateEntered")]}{.state} {end}')"
[[ "$firsts" == "First Pause Second " ]] || fail "states entered: $firsts"
kubectl -n "$NS" get workflowruns "$RUN" | grep -Eq "^$RUN +twice +Succeeded +[0-9.m]+s " ||
  fail "kubectl get workflowruns: $(kubectl -n "$NS" get workflowruns "$RUN")"
kubectl fn -n "$NS" graph twice --run "$RUN" | grep -q '^digraph' || fail "kubectl fn graph --run"

log "scaling to zero and back, as before the restart"
live_pods() { kubectl -n "$NS" get pods -l serving.knative.dev/revision=counter-00001 -o jsonpath='{range .items[?(!@.metadata.deletionTimestamp)]}{.metadata.name} {end}'; }
wait_for 60 sh -c "[ -z \"\$(kubectl -n $NS get pods -l serving.knative.dev/revision=counter-00001 -o jsonpath='{.items[?(!@.metadata.deletionTimestamp)].metadata.name}')\" ]" ||
  fail "still running: $(live_pods)"
wait_for 60 sh -c "kubectl -n $NS get pods -l functions.minik8s.io/pool=python3 -o jsonpath='{.items[*].status.conditions[?(@.type==\"Ready\")].status}' | grep -q True" ||
  fail "no warm pool pod after scaling to zero"
[[ "$(call)" == 200 && "$(cat "$WORK/body")" == '{"n": 42}' ]] || fail "the call from zero: $(cat "$WORK/body")"
kubectl -n "$NS" get pods -l serving.knative.dev/revision=counter-00001 --show-labels | grep -q functions.minik8s.io/specialized ||
  fail "the call from zero was not served by a pool pod"
log "functions and workflow runs survive a restart of the server"
