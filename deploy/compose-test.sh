#!/usr/bin/env bash
# The compose stack, run for real, as a user runs it (docker-compose.yml and the Dockerfile
# as they are): `docker compose up --scale worker=3`, the 1,000,000-word demo input, two
# workers SIGKILLed and one restarted mid-run, then exact final counts, the broker refusing an
# anonymous client and the workers' login what is not theirs, Prometheus scraping every target
# with every alert rule loaded, and everything torn down (volumes included).
#
#   bash deploy/compose-test.sh
#   COMPOSE_CLUSTER=1 bash deploy/compose-test.sh   # on three brokers (docker-compose.cluster.yml),
#                                                   # one of them SIGKILLed mid-run as well
#
# Needs root on Debian (bookworm). Installs what is missing: Debian's docker.io (and starts
# dockerd), Docker Compose v2 built from its Go module (cached in ~/.cache/processor), and,
# where no image registry is reachable, local stand-ins for the base images
# (deploy/standins/). Grafana has no stand-in and is not started. Ends with one line:
#   compose-test: PASS (...)   or   compose-test: FAIL: <why>
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STARTED=$(date +%s)
CACHE="${PROCESSOR_CACHE_DIR:-$HOME/.cache/processor}"
COMPOSE_VERSION=v2.40.3
WORK="$(mktemp -d /tmp/compose-test.XXXXXX)"
PROJECT=processor-compose-test
WORKERS=3
WORDS=1000000
# Host ports of this run (the stack publishes Kafka and Prometheus on 127.0.0.1 only).
export KAFKA_HOST_PORT="${KAFKA_HOST_PORT:-23094}"
export PROMETHEUS_HOST_PORT="${PROMETHEUS_HOST_PORT:-23090}"
export KAFKA_2_HOST_PORT="${KAFKA_2_HOST_PORT:-23095}" KAFKA_3_HOST_PORT="${KAFKA_3_HOST_PORT:-23096}"
export PROCESSOR_IMAGE="${PROCESSOR_IMAGE:-processor:compose-test}"
export DEMO_WORDS=$WORDS
export DOCKER_BUILDKIT=0 # the classic builder: Debian's engine has no buildx
SERVICES=(kafka topics coordinator worker prometheus) # then the producer, once they are healthy
FILES=(-f "$ROOT/docker-compose.yml")
CLUSTER="${COMPOSE_CLUSTER:-}"
if [ -n "$CLUSTER" ]; then
  FILES+=(-f "$ROOT/docker-compose.cluster.yml")
  SERVICES=(kafka kafka-2 kafka-3 "${SERVICES[@]:1}")
fi
STARTED_DOCKERD=""
UP=""

say() { echo "compose-test: $*" >&2; }
elapsed() { echo "$(($(date +%s) - STARTED)) s"; }
fail() {
  echo "compose-test: FAIL: $* ($(elapsed))"
  exit 1
}
compose() { docker compose -p "$PROJECT" "${FILES[@]}" "$@"; }

cleanup() {
  local code=$?
  if [ -n "$UP" ]; then
    if [ $code -ne 0 ]; then
      compose ps -a >"$WORK/ps.txt" 2>&1 || true
      compose logs --no-color >"$WORK/logs.txt" 2>&1 || true
      say "containers and logs of the failed run: $WORK/ps.txt, $WORK/logs.txt"
      tail -n 40 "$WORK/logs.txt" >&2 || true
    fi
    compose down -v --remove-orphans --timeout 30 >/dev/null 2>&1 || true
  fi
  if [ -n "$STARTED_DOCKERD" ]; then
    kill "$STARTED_DOCKERD" 2>/dev/null || true
    wait "$STARTED_DOCKERD" 2>/dev/null || true
  fi
  [ $code -eq 0 ] && rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || fail "needs root (it installs packages and runs dockerd)"

# ------------------------------------------------------------------------------ install
APT_UPDATED=""
apt_install() {
  if [ -z "$APT_UPDATED" ]; then
    apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 \
    apt-get install -y -qq --no-install-recommends "$@" >"$WORK/apt.log" 2>&1 ||
    { tail -n 20 "$WORK/apt.log" >&2; fail "apt-get install $* failed"; }
}

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  apt_install docker.io
fi

# Docker Compose v2: a CLI plugin built from its Go module (`go install` refuses the module's
# replace directives, so it is downloaded and built in its folder).
compose_plugin() {
  local bin="$CACHE/compose/$COMPOSE_VERSION/docker-compose"
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null || fail "Go is needed to build Docker Compose"
    say "building Docker Compose $COMPOSE_VERSION from its Go module (a few minutes, once)"
    local gopath="$CACHE/go"
    local dir
    dir=$(GOPATH="$gopath" GOMODCACHE="$gopath/mod" GOFLAGS=-mod=mod \
      go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
    mkdir -p "$(dirname "$bin")"
    (cd "$dir" && GOPATH="$gopath" GOMODCACHE="$gopath/mod" GOFLAGS=-mod=mod CGO_ENABLED=0 \
      go build -trimpath -o "$bin.tmp" \
      -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" ./cmd)
    mv "$bin.tmp" "$bin"
  fi
  mkdir -p /usr/local/lib/docker/cli-plugins
  install -m 0755 "$bin" /usr/local/lib/docker/cli-plugins/docker-compose
}
COMPOSE_PID=""
if ! docker compose version >/dev/null 2>&1; then
  compose_plugin >"$WORK/compose-build.log" 2>&1 &
  COMPOSE_PID=$!
fi

# The engine: Debian's dockerd, started here when none answers.
if ! docker info >/dev/null 2>&1; then
  say "starting dockerd"
  dockerd >"$WORK/dockerd.log" 2>&1 &
  STARTED_DOCKERD=$!
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$STARTED_DOCKERD" 2>/dev/null || {
      tail -n 20 "$WORK/dockerd.log" >&2
      STARTED_DOCKERD=""
      fail "dockerd exited (log above)"
    }
    sleep 1
  done
  docker info >/dev/null 2>&1 || fail "dockerd did not answer within 60 s"
fi

# ------------------------------------------------------------------------------ images
# The base images the files name; stand-ins only for those that cannot be pulled.
PYTHON_IMAGE=$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)
KAFKA_IMAGE=$(sed -n 's/^x-kafka-image: &kafka-image //p' docker-compose.yml)
PROMETHEUS_IMAGE=$(sed -n 's/.*image: ${PROMETHEUS_IMAGE:-\(.*\)}$/\1/p' docker-compose.yml)
export PROMETHEUS_IMAGE
BUILD_ARGS=()
if ! docker image inspect "$PYTHON_IMAGE" >/dev/null 2>&1 &&
  ! timeout 120 docker pull -q "$PYTHON_IMAGE" >/dev/null 2>&1; then
  # A digest names the registry's image: a local stand-in can only take the tag's name.
  BUILD_ARGS=(--build-arg "PYTHON_IMAGE=${PYTHON_IMAGE%@*}")
  PYTHON_IMAGE="${PYTHON_IMAGE%@*}"
fi
missing=()
for image in "$PYTHON_IMAGE" "$KAFKA_IMAGE" "$PROMETHEUS_IMAGE"; do
  docker image inspect "$image" >/dev/null 2>&1 || missing+=("$image")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v mmdebstrap >/dev/null || apt_install mmdebstrap
  command -v mvn >/dev/null || apt_install maven
  bash deploy/standins/build.sh "${missing[@]}"
fi

# The project image, built once for every processor service (compose's own build of it
# would run only for `up --build`).
say "building $PROCESSOR_IMAGE"
docker build -q "${BUILD_ARGS[@]}" -t "$PROCESSOR_IMAGE" . >"$WORK/build.log" 2>&1 ||
  { tail -n 30 "$WORK/build.log" >&2; fail "docker build failed"; }

if [ -n "$COMPOSE_PID" ]; then
  wait "$COMPOSE_PID" || { tail -n 30 "$WORK/compose-build.log" >&2; fail "building Docker Compose failed"; }
fi
docker compose version >/dev/null 2>&1 || fail "docker compose is not usable"

# ------------------------------------------------------------------------------ run
health() { docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$1" 2>/dev/null; }
ids() { compose ps -q "$@"; }

# wait_healthy SECONDS: the coordinator and every worker report healthy (their /healthz).
wait_healthy() {
  local deadline=$(($(date +%s) + $1)) all ok id
  while [ "$(date +%s)" -lt $deadline ]; do
    all=$(ids coordinator worker)
    ok=0
    for id in $all; do [ "$(health "$id")" = healthy ] && ok=$((ok + 1)); done
    [ "$ok" -eq $((WORKERS + 1)) ] && [ "$(echo "$all" | wc -w)" -eq $((WORKERS + 1)) ] && return 0
    sleep 2
  done
  return 1
}

# prom QUERY: the result vector of an instant query, as JSON.
prom() {
  curl -fsS --max-time 5 "http://127.0.0.1:$PROMETHEUS_HOST_PORT/api/v1/query" \
    --data-urlencode "query=$1" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["data"]["result"]))'
}

say "docker compose up --scale worker=$WORKERS (${SERVICES[*]})"
UP=1
compose up -d --no-build --scale worker=$WORKERS "${SERVICES[@]}" >"$WORK/up.log" 2>&1 ||
  { cat "$WORK/up.log" >&2; fail "docker compose up failed"; }
wait_healthy 240 || fail "coordinator and $WORKERS workers not healthy within 240 s"
say "healthy: coordinator and $WORKERS workers ($(elapsed))"

# Mid-run: the producer starts once the job is healthy; as soon as its first records are in
# the input topic (a probe inside the coordinator's container polls every 20 ms), SIGKILL the
# processor in two worker containers (the container's init exits with it and compose's
# restart policy brings it back) and restart a third container. The result line says how
# much of the input and of the job's progress there was at that moment.
probe_first_records() {
  compose exec -T coordinator python -c '
import json, time, urllib.request
from confluent_kafka import Consumer, TopicPartition
from processor.config import Settings
s = Settings()
c = Consumer({**s.client_config(), "group.id": f"{s.job_name}.compose-test-probe"})
parts = c.list_topics(s.input_topic, timeout=10).topics[s.input_topic].partitions
deadline = time.monotonic() + 300
n = 0
while n == 0 and time.monotonic() < deadline:
    n = sum(c.get_watermark_offsets(TopicPartition(s.input_topic, p), timeout=5)[1] for p in parts)
    time.sleep(0.02)
c.close()
doc = json.load(urllib.request.urlopen("http://127.0.0.1:9400/api/status", timeout=5))
print(n, doc["checkpoints"].get("last_completed") or 0)'
}
probe_first_records >"$WORK/probe.txt" 2>"$WORK/probe.err" &
PROBE=$!
sleep 2 # the probe is polling
say "docker compose up producer ($WORDS words)"
compose up -d --no-build --no-deps producer >>"$WORK/up.log" 2>&1 ||
  { cat "$WORK/up.log" >&2; fail "docker compose up producer failed"; }
wait "$PROBE" || { cat "$WORK/probe.err" >&2; fail "the input probe failed"; }
read -r records checkpoint <"$WORK/probe.txt"
[ "${records:-0}" -gt 0 ] || fail "no input arrived within 300 s"
KILLED_AT="the first $records input lines in, checkpoint $checkpoint"
mapfile -t workers < <(ids worker)
[ ${#workers[@]} -eq $WORKERS ] || fail "${#workers[@]} worker containers, not $WORKERS"
for id in "${workers[0]}" "${workers[1]}"; do
  init=$(docker inspect -f '{{.State.Pid}}' "$id")
  pid=$(ps -o pid= --ppid "$init" | head -n 1 | tr -d ' ')
  [ -n "$pid" ] || fail "no processor process in worker container ${id:0:12}"
  say "SIGKILL processor (pid $pid) in worker ${id:0:12}"
  kill -KILL "$pid"
done
say "restarting worker ${workers[2]:0:12}"
docker restart -t 30 "${workers[2]}" >/dev/null
if [ -n "$CLUSTER" ]; then
  # A broker too: its partitions' leaders move to the other two, and it comes back in sync.
  say "SIGKILL broker kafka-2"
  compose kill -s KILL kafka-2 >/dev/null 2>&1 || fail "docker compose kill kafka-2 failed"
  sleep 10
  compose start kafka-2 >/dev/null 2>&1 || fail "docker compose start kafka-2 failed"
  KILLED_AT="$KILLED_AT; broker kafka-2 SIGKILLed for 10 s"
fi
sleep 5
wait_healthy 180 || fail "the workers did not come back healthy within 180 s"
restarts=0
for id in "${workers[0]}" "${workers[1]}"; do
  restarts=$((restarts + $(docker inspect -f '{{.RestartCount}}' "$id")))
done
[ "$restarts" -ge 2 ] || fail "the killed workers were not restarted (restart count $restarts)"
say "recovered: $WORKERS workers healthy again ($(elapsed))"

# The producer wrote its corpus and exited 0; a second run adds nothing (once per topic).
producer=$(compose ps -a -q producer)
[ "$(docker inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$producer")" = "exited 0" ] ||
  fail "the producer did not finish: $(docker inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$producer")"
compose run --rm --no-deps -T producer >"$WORK/producer-again.log" 2>&1 ||
  { cat "$WORK/producer-again.log" >&2; fail "the producer's second run failed"; }
grep -q "already has records: nothing produced" "$WORK/producer-again.log" ||
  { cat "$WORK/producer-again.log" >&2; fail "the producer's second run wrote the corpus again"; }

# Exact counts, from inside the compose network with the user's own login (`client`, the
# `cli` service's): `processor counts` and a direct count of the input topic
# (deploy/compose_check.py) against the committed output.
check=$(compose run --rm --no-deps -T -v "$ROOT/deploy/compose_check.py:/tmp/check.py:ro" \
  --entrypoint python cli /tmp/check.py 300 2>"$WORK/check.err") ||
  { cat "$WORK/check.err" >&2; fail "${check:-the count check failed}"; }
counts=$(compose run --rm --no-deps -T cli counts --top 3 2>/dev/null | tail -n 1)
total=$(echo "$counts" | sed -n 's/.*, \([0-9,]*\) in total$/\1/p' | tr -d ,)
[ "$total" = "$WORDS" ] || fail "processor counts: '$counts', not $WORDS words"
say "processor counts: $counts; $check"

# The broker's authentication and ACLs (deploy/compose_refusals.py, in a worker with its login):
# anonymous clients get nothing, the workers' login nothing of the coordinator's.
refusals=$(compose exec -T worker python - <deploy/compose_refusals.py 2>"$WORK/refusals.err") ||
  { cat "$WORK/refusals.err" >&2; fail "${refusals:-the refusal check failed}"; }
say "$refusals"

# Prometheus: every coordinator and worker target up, every alert rule loaded, and the
# `worker` label is the worker id the coordinator knows.
deadline=$(($(date +%s) + 90))
while :; do
  targets=$(curl -fsS --max-time 5 "http://127.0.0.1:$PROMETHEUS_HOST_PORT/api/v1/targets?state=active" |
    python3 -c '
import json, sys
active = json.load(sys.stdin)["data"]["activeTargets"]
up = {}
for t in active:
    job = t["labels"]["job"]
    up.setdefault(job, [0, 0])[0 if t["health"] == "up" else 1] += 1
print(" ".join(f"{job}={u}/{u + d}" for job, (u, d) in sorted(up.items())))' 2>/dev/null || true)
  [ "$targets" = "processor-coordinator=1/1 processor-worker=$WORKERS/$WORKERS" ] && break
  [ "$(date +%s)" -lt $deadline ] || fail "Prometheus targets: '$targets', not every coordinator and worker target up"
  sleep 3
done
want_rules=$(python3 -c 'import sys, yaml; print(sum(1 for g in yaml.safe_load(open(sys.argv[1]))["groups"] for _ in g["rules"]))' deploy/prometheus/rules/processor.yml 2>/dev/null ||
  grep -c '^      - alert:' deploy/prometheus/rules/processor.yml)
got_rules=$(curl -fsS --max-time 5 "http://127.0.0.1:$PROMETHEUS_HOST_PORT/api/v1/rules" |
  python3 -c 'import json, sys; print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
[ "$got_rules" = "$want_rules" ] || fail "Prometheus loaded $got_rules alert rules, not $want_rules"
labels=$(prom 'count by (worker) (process_start_time_seconds{job="processor-worker"})' |
  python3 -c 'import json, sys; print(" ".join(sorted(r["metric"].get("worker", "") for r in json.load(sys.stdin))))')
known=$(compose exec -T coordinator python -c '
import json, urllib.request
doc = json.load(urllib.request.urlopen("http://127.0.0.1:9400/api/status", timeout=5))
print(" ".join(sorted(w["worker"] for w in doc["workers"] if w.get("alive"))))')
[ -n "$labels" ] && [ "$labels" = "$known" ] ||
  fail "worker labels in Prometheus '$labels' are not the live worker ids '$known'"
say "Prometheus: $targets, $got_rules rules, worker labels = worker ids"

compose down -v --remove-orphans --timeout 30 >/dev/null 2>&1 || fail "docker compose down failed"
UP=""
left=$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT" | wc -l)
[ "$left" -eq 0 ] || fail "$left volumes left after down -v"
echo "compose-test: PASS: ${CLUSTER:+3 brokers, }$WORDS words exact after 2 SIGKILLs and 1 restart of $WORKERS workers (at $KILLED_AT); SASL and ACLs: anonymous and the workers' login refused; $targets; $got_rules alert rules; $(elapsed)"
