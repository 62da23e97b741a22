#!/usr/bin/env bash
# Builds the tarn image from the Dockerfile with no network: the builder stage runs on a Go image
# made from this machine's toolchain (scripts/images.sh go), and the modules are vendored into
# a temporary build context (a copy of the repository's files; vendor/ is never committed).
# Prints the variable that points the container tests at the image:
#
#   eval "$(scripts/tarn-image.sh)"   exports TARN_TEST_TARN_IMAGE
#
# The image is rebuilt only when its inputs change (the files of the context, the Go image), or
# when it is missing; the build's time and the image's size go to stderr. Needs an engine:
# DOCKER_HOST as scripts/dockerd.sh start prints it.
#
#   TARN_IMAGE      image to build (default tarn:dev)
#   TARN_GO_IMAGE   builder base (default: the one scripts/images.sh go builds)
set -euo pipefail
cd "$(dirname "$0")/.."

image="${TARN_IMAGE:-tarn:dev}"

fail() {
	echo "tarn-image: $*" >&2
	exit 1
}

command -v docker >/dev/null || fail "docker CLI not found"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || fail "no Docker engine answers at ${DOCKER_HOST:-the default socket}; run scripts/dockerd.sh start"
if [[ -z ${TARN_GO_IMAGE:-} ]]; then
	eval "$(scripts/images.sh go)"
fi

work="$(mktemp -d -t tarn-image-XXXXXX)"
trap 'rm -rf "$work"' EXIT
ctx="$work/context"
mkdir -p "$ctx"

# The context is what go build sees in this work tree: tracked files as they are now, and new
# files not ignored (.gitignore), less those deleted but not yet committed.
git ls-files -z --cached --others --exclude-standard --deduplicate |
	tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$ctx" -xf -
# What .dockerignore leaves out of the build (bench results, local data) must not count as an
# input either: drop it here. Its patterns are root-relative globs, as the shell expands them.
shopt -s nullglob dotglob
while read -r pattern; do
	[[ -z $pattern || $pattern == \#* ]] && continue
	for path in "$ctx"/$pattern; do
		rm -rf "$path"
	done
done <.dockerignore
shopt -u nullglob dotglob

inputs="$({
	docker image inspect --format '{{.Id}}' "$TARN_GO_IMAGE"
	cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum
} | sha256sum | cut -c1-16)"
have="$(docker image inspect --format '{{index .Config.Labels "tarn.inputs"}}' "$image" 2>/dev/null || true)"
if [[ $have != "$inputs" ]]; then
	t0=$SECONDS
	# GOFLAGS=-mod=mod: go mod vendor must read the module cache, whatever GOFLAGS says here.
	(cd "$ctx" && GOFLAGS=-mod=mod GOPROXY=off go mod vendor) >"$work/vendor.log" 2>&1 ||
		fail "go mod vendor failed (a module missing from the cache needs go mod download, with network):
$(tail -n 15 "$work/vendor.log")"
	vendor_t=$((SECONDS - t0))
	old="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
	docker build -q --build-arg GO_IMAGE="$TARN_GO_IMAGE" --build-arg VENDORED=1 \
		--label tarn.inputs="$inputs" -t "$image" "$ctx" >"$work/build.log" 2>&1 ||
		fail "docker build failed:
$(tail -n 30 "$work/build.log")"
	# The image replaced, and the builder stage (hundreds of MB of Go build cache, useless to the
	# next build, whose context differs), stay behind as dangling images: drop them.
	[[ -z $old ]] || docker rmi "$old" >/dev/null 2>&1 || true
	docker image prune -f --filter label=tarn.stage=build >/dev/null 2>&1 || true
	size="$(docker image inspect --format '{{.Size}}' "$image")"
	echo "tarn-image: built $image in $((SECONDS - t0))s (go mod vendor ${vendor_t}s), $((size / 1000000)) MB" >&2
fi
echo "export TARN_TEST_TARN_IMAGE=$image"
