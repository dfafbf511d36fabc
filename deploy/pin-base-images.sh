#!/usr/bin/env bash
# Pins the Dockerfile's base image by digest: pulls the tag of `ARG PYTHON_IMAGE` from its
# registry and rewrites the default to <tag>@sha256:<the registry's digest>, so that every
# build starts from the same bytes until the next run of this script. Needs a Docker engine
# that reaches the registry (none does on the development machines: there the default stays
# as it is and deploy/compose-test.sh builds on a local stand-in of the tag).
#
#   bash deploy/pin-base-images.sh && git diff Dockerfile
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
current=$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)
[ -n "$current" ] || { echo "pin-base-images: no ARG PYTHON_IMAGE= in Dockerfile" >&2; exit 2; }
tag="${current%@*}"
docker pull -q "$tag" >/dev/null
digest=$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$tag" |
  sed -n "s|^${tag%:*}@||p" | head -n 1)
case "$digest" in
  sha256:*) ;;
  *) echo "pin-base-images: $tag has no registry digest (a local image?)" >&2; exit 1 ;;
esac
sed -i "s|^ARG PYTHON_IMAGE=.*|ARG PYTHON_IMAGE=$tag@$digest|" Dockerfile
echo "pin-base-images: PYTHON_IMAGE=$tag@$digest"
