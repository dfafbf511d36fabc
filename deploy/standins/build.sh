#!/usr/bin/env bash
# Makes the named images available to the local Docker engine: an image that is there already
# or can be pulled is left alone; otherwise a stand-in is built from Debian packages under the
# same name (see README.md here). Needs root, mmdebstrap and a running engine.
#
#   bash deploy/standins/build.sh IMAGE...
#   bash deploy/standins/build.sh --verify-jars LIBS KAFKA_VERSION   # the jar check alone
#
# The Kafka stand-in's jars come from Maven Central through mvn (kafka/pom.xml), cached in
# ~/.cache/processor/standins, and are checked against the committed SHA-256 lists the local
# broker's and tools' jars are (processor/localkafka/checksums/, processor/maven.py): the stand-in's
# set is the union of the two, so its libs must hold exactly the files they list, each with its
# hash, before an image is built from them (and again each time the cache is used).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHECKSUMS="${PROCESSOR_STANDIN_CHECKSUMS:-$HERE/../../processor/localkafka/checksums}"
CACHE="${PROCESSOR_CACHE_DIR:-$HOME/.cache/processor}/standins"

say() { echo "standins: $*" >&2; }

# The host's apt sources and settings, so that the root filesystem comes from the same
# mirror the host uses.
sources() {
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    echo /etc/apt/sources.list.d/debian.sources
  elif [ -s /etc/apt/sources.list ]; then
    echo /etc/apt/sources.list
  else
    echo http://deb.debian.org/debian
  fi
}

# rootfs IMAGE PACKAGES [mmdebstrap options...] -- [docker import --change options...]
# A Debian bookworm minbase root filesystem with PACKAGES, imported as IMAGE.
rootfs() {
  local image="$1" packages="$2"
  shift 2
  local opts=() changes=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  changes=("$@")
  say "building $image from Debian bookworm ($packages)"
  local tar
  tar="$(mktemp --suffix=.tar)"
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --essential-hook='mkdir -p "$1/usr/share/man/man1"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "${opts[@]}" \
    bookworm "$tar" "$(sources)"
  # Imported only once complete: a failed build must not leave an empty image by that name.
  docker import "${changes[@]}" "$tar" "$image" >/dev/null
  rm -f "$tar"
}

python_image() {
  rootfs "$1" python3,python3-venv,passwd,ca-certificates \
    --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python"' \
    --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python3"' \
    --customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"' \
    -- \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]'
}

# verify_jars LIBS VERSION: every file of LIBS in kafka-VERSION.sha256 or
# kafka-tools-VERSION.sha256 with that SHA-256, and every listed file there; else one line
# naming the file, and exit 1.
verify_jars() {
  local libs="$1" version="$2" lists=() list name want got
  for list in "$CHECKSUMS/kafka-$version.sha256" "$CHECKSUMS/kafka-tools-$version.sha256"; do
    [ -f "$list" ] || { echo "standins: no checksum list $list for Kafka $version's jars" >&2; exit 1; }
    lists+=("$list")
  done
  declare -A sums=()
  while read -r want name; do
    name="${name#\*}"
    if [ -n "${sums[$name]:-}" ] && [ "${sums[$name]}" != "$want" ]; then
      echo "standins: $name has two different SHA-256 in ${lists[*]}" >&2
      exit 1
    fi
    sums[$name]=$want
  done < <(cat "${lists[@]}")
  for jar in "$libs"/*; do
    name="$(basename "$jar")"
    want="${sums[$name]:-}"
    [ -n "$want" ] || { echo "standins: $jar: not in the checksum lists ${lists[*]}" >&2; exit 1; }
    got="$(sha256sum "$jar" | cut -d' ' -f1)"
    [ "$got" = "$want" ] ||
      { echo "standins: $jar: SHA-256 $got is not $want of the checksum lists" >&2; exit 1; }
    unset "sums[$name]"
  done
  for name in "${!sums[@]}"; do
    echo "standins: $libs/$name: in the checksum lists but not fetched" >&2
    exit 1
  done
}

kafka_libs() {
  local version="$1" dir="$CACHE/kafka-$1"
  if [ ! -f "$dir/.complete" ]; then
    say "fetching the jars of Kafka $version with mvn"
    rm -rf "$dir/libs"
    mkdir -p "$dir"
    # --strict-checksums: a download that does not match the repository's checksum fails;
    # verify_jars then checks every file against the committed lists.
    (cd "$dir" && mvn -q -B -Dstyle.color=never --strict-checksums -f "$HERE/kafka/pom.xml" \
      dependency:copy-dependencies -DincludeScope=runtime \
      -Dkafka.version="$version" -DoutputDirectory="$dir/libs" >"$dir/mvn.log" 2>&1) ||
      { cat "$dir/mvn.log" >&2; say "mvn failed"; exit 1; }
    touch "$dir/.complete"
  fi
  verify_jars "$dir/libs" "$version"
  echo "$dir/libs"
}

kafka_image() {
  local libs
  libs="$(kafka_libs "${1#*:}")"
  local hooks=(
    --customize-hook="mkdir -p \"\$1/opt/kafka/bin\" \"\$1/opt/kafka/config\" \"\$1/var/lib/kafka/data\""
    --customize-hook="cp -r '$libs' \"\$1/opt/kafka/libs\""
    --customize-hook="mkdir -p \"\$1/etc/kafka/docker\" && cp '$HERE/kafka/run' \"\$1/etc/kafka/docker/run\""
    --customize-hook="cp '$HERE/kafka/log4j2.xml' \"\$1/opt/kafka/config/log4j2.xml\""
    --customize-hook="for t in kafka-topics.sh kafka-broker-api-versions.sh; do cp '$HERE/kafka/tool' \"\$1/opt/kafka/bin/\$t\"; done"
    --customize-hook='chroot "$1" useradd --uid 1000 --user-group --no-create-home --home-dir /opt/kafka appuser'
    --customize-hook='chown -R 1000:1000 "$1/opt/kafka/config" "$1/var/lib/kafka"'
  )
  rootfs "$1" openjdk-17-jre-headless,passwd "${hooks[@]}" -- \
    --change 'ENV PATH=/opt/kafka/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'USER appuser' \
    --change 'WORKDIR /opt/kafka' \
    --change 'EXPOSE 9092' \
    --change 'ENTRYPOINT ["/etc/kafka/docker/run"]'
}

prometheus_image() {
  rootfs "$1" prometheus \
    --customize-hook='mkdir -p "$1/prometheus" "$1/etc/prometheus" && chown 65534:65534 "$1/prometheus"' \
    -- \
    --change 'USER nobody' \
    --change 'WORKDIR /prometheus' \
    --change 'EXPOSE 9090' \
    --change 'ENTRYPOINT ["/usr/bin/prometheus"]' \
    --change 'CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]'
}

# `build.sh --verify-jars LIBS VERSION`: only the check above (tests/unit/test_deploy.py).
if [ "${1:-}" = "--verify-jars" ]; then
  verify_jars "$2" "$3"
  exit 0
fi

# Each missing image is built in the background (downloads overlap); all must succeed.
LOGS="$(mktemp -d)"
pids=()
names=()
for image in "$@"; do
  if docker image inspect "$image" >/dev/null 2>&1; then
    say "$image: present"
    continue
  fi
  if timeout 120 docker pull -q "$image" >/dev/null 2>&1; then
    say "$image: pulled"
    continue
  fi
  case "$image" in
    python:*) build=python_image ;;
    apache/kafka:*) build=kafka_image ;;
    prom/prometheus:*) build=prometheus_image ;;
    *) say "$image cannot be pulled and has no stand-in recipe"; exit 2 ;;
  esac
  say "$image: building a stand-in from Debian packages"
  log="$LOGS/${#names[@]}.log"
  ("$build" "$image" >"$log" 2>&1) &
  pids+=($!)
  names+=("$image")
done
failed=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    say "${names[$i]}: built stand-in"
  else
    say "${names[$i]}: building the stand-in failed:"
    tail -n 30 "$LOGS/$i.log" >&2
    failed=1
  fi
done
rm -rf "$LOGS"
exit $failed
