#!/usr/bin/env bash
# Builds the container tests' images without any registry, from what this machine has, and
# prints the variables that point the harness at them:
#
#   tarn-test/postgres:15     the machine's Postgres 15 server (Debian's postgresql-15 files and
#                             the shared libraries they load), testcontainers/images/postgres
#   tarn-test/kafka:4.1.1     the cached Kafka jars (scripts/kafka-jars.sh) on a JRE that jlink
#                             makes from the machine's JDK 17, testcontainers/images/kafka
#   tarn-build/go:1.26        the machine's Go toolchain (/usr/local/go) with dash and mkdir: the
#                             builder stage of the Dockerfile here (scripts/tarn-image.sh), in
#                             place of golang:1.26, which cannot be pulled
#
# Each image is a one-layer `docker import` of a rootfs tarball, with no shell beyond dash and the
# few tools its entry point uses. An image is rebuilt only when its inputs change (this script,
# its build context, the Postgres version, the jar list or the JDK), or when it is missing.
# Needs an engine: DOCKER_HOST as scripts/dockerd.sh start prints it.
#
#   eval "$(scripts/images.sh)"   exports TARN_TEST_POSTGRES_IMAGE and TARN_TEST_KAFKA_IMAGE
#   scripts/images.sh go          builds only the Go image and prints TARN_GO_IMAGE's assignment
#                                 (arguments name the images to build: postgres, kafka, go)
#
#   TARN_PG_MAJOR        Postgres major version (default 15)
#   TARN_KAFKA_VERSION   Kafka version (default 4.1.1)
#   TARN_KAFKA_LIBS      folder of Kafka jars (default: what scripts/kafka-jars.sh prints)
#   TARN_JDK             JDK whose jmods jlink uses (default /usr/lib/jvm/java-17-openjdk-amd64);
#                        without one, the Java runtime on PATH is copied whole
#   TARN_GOROOT          Go toolchain of the Go image (default: what `go env GOROOT` prints)
set -euo pipefail
cd "$(dirname "$0")/.."

pg_major="${TARN_PG_MAJOR:-15}"
kafka_version="${TARN_KAFKA_VERSION:-4.1.1}"
jdk="${TARN_JDK:-/usr/lib/jvm/java-17-openjdk-amd64}"
pg_image="tarn-test/postgres:$pg_major"
kafka_image="tarn-test/kafka:$kafka_version"
goroot="${TARN_GOROOT:-$(go env GOROOT 2>/dev/null || true)}"

fail() {
	echo "images: $*" >&2
	exit 1
}

# inputs is the hash of what the image being built is made from; build sets it, import labels it.
inputs=""
work="$(mktemp -d -t tarn-images-XXXXXX)"
trap 'rm -rf "$work"' EXIT

# copy_libs ROOT FILE...: copies the shared libraries that ldd lists for each ELF FILE (and the
# dynamic loader) into ROOT at their real folders, under the name the loader looks for. Libraries
# found inside ROOT (through LD_LIBRARY_PATH) are already there.
copy_libs() {
	local root="$1" lib dir
	shift
	for f in "$@"; do
		# ldd prints nothing useful for scripts and data files; a library it cannot find is fatal.
		if ldd "$f" 2>/dev/null | grep -q 'not found'; then
			fail "$f needs a library this machine lacks: $(ldd "$f" | grep 'not found' | head -n 1)"
		fi
		{ ldd "$f" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}'
	done | sort -u | while read -r lib; do
		[[ $lib == "$root"/* ]] && continue # already in the image
		dir="$(readlink -f "$(dirname "$lib")")"
		[[ -e $root$dir/$(basename "$lib") ]] && continue
		mkdir -p "$root$dir"
		cp -L "$lib" "$root$dir/"
	done
}

# base_rootfs ROOT USER UID: a merged-/usr skeleton with dash as /bin/sh, the given tools, and
# passwd/group entries for root and the image's user.
base_rootfs() {
	local root="$1" user="$2" uid="$3"
	shift 3
	mkdir -p "$root"/{usr/bin,usr/lib,usr/lib64,etc,tmp,proc,sys,dev}
	ln -s usr/bin "$root/bin"
	ln -s usr/bin "$root/sbin"
	ln -s usr/lib "$root/lib"
	ln -s usr/lib64 "$root/lib64"
	chmod 1777 "$root/tmp"
	cp -L /bin/dash "$root/usr/bin/sh"
	local tool
	for tool in "$@"; do
		cp -L "$(command -v "$tool")" "$root/usr/bin/"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\n%s:x:%d:%d::/var/lib/%s:/bin/sh\n' "$user" "$uid" "$uid" "$user" >"$root/etc/passwd"
	printf 'root:x:0:\n%s:x:%d:\n' "$user" "$uid" >"$root/etc/group"
}

# import ROOT IMAGE UID HOME CHANGE...: tars ROOT (owned by root) plus HOME owned by UID, and
# imports it as IMAGE with the given Dockerfile changes.
import() {
	local root="$1" image="$2" uid="$3" home="$4"
	shift 4
	local changes=()
	for c in "$@"; do
		changes+=(--change "$c")
	done
	mkdir -p "$work/home/$home"
	tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$work/rootfs.tar" .
	tar -C "$work/home" --numeric-owner --owner="$uid" --group="$uid" -rf "$work/rootfs.tar" "./$home"
	docker import "${changes[@]}" --change "LABEL tarn.inputs=$inputs" "$work/rootfs.tar" "$image" >/dev/null
	rm -rf "$work/rootfs.tar" "$work/home"
}

build_postgres() {
	local src="/usr/lib/postgresql/$pg_major" root="$work/postgres"
	[[ -x $src/bin/postgres ]] || fail "no Postgres $pg_major server in $src; apt-get install postgresql-$pg_major"
	base_rootfs "$root" postgres 999
	mkdir -p "$root/usr/lib/postgresql" "$root/usr/share/postgresql" "$root/usr/share/zoneinfo"
	# JIT (LLVM, ~100 MB) is left out: without its library the server simply does not JIT.
	cp -a "$src" "$root/usr/lib/postgresql/"
	rm -rf "$root/usr/lib/postgresql/$pg_major"/lib/{llvmjit*,bitcode}
	cp -a "/usr/share/postgresql/$pg_major" "$root/usr/share/postgresql/"
	cp -a /usr/share/zoneinfo/. "$root/usr/share/zoneinfo/"
	cp testcontainers/images/postgres/entrypoint.sh "$root/usr/bin/tarn-entrypoint"
	copy_libs "$root" /bin/dash "$root/usr/lib/postgresql/$pg_major"/bin/* "$root/usr/lib/postgresql/$pg_major"/lib/*.so
	import "$root" "$pg_image" 999 var/lib/postgresql \
		"ENV PATH=/usr/lib/postgresql/$pg_major/bin:/usr/bin" "ENV TZ=UTC" "ENV PGDATA=/var/lib/postgresql/data" \
		"USER 999:999" "WORKDIR /var/lib/postgresql" "EXPOSE 5432" \
		'ENTRYPOINT ["/usr/bin/tarn-entrypoint"]' 'CMD ["postgres"]'
}

# kafka_libs is the folder of Kafka jars: TARN_KAFKA_LIBS, as for the local broker, or the cache
# of scripts/kafka-jars.sh.
kafka_libs() {
	if [[ -n ${TARN_KAFKA_LIBS:-} ]]; then
		echo "$TARN_KAFKA_LIBS"
	else
		scripts/kafka-jars.sh
	fi
}

# jre DEST: a Java runtime for the image. jlink makes a small one (~50 MB) from the JDK's jmods:
# java.se plus the JDK modules Kafka reaches for (Unsafe, EC keys, JMX, zip, DNS, Kerberos).
# Without a JDK, the runtime that runs java here is copied whole.
jre() {
	if [[ -x $jdk/bin/jlink && -d $jdk/jmods ]]; then
		"$jdk/bin/jlink" --add-modules java.se,jdk.unsupported,jdk.crypto.ec,jdk.management,jdk.zipfs,jdk.naming.dns,jdk.security.auth,jdk.security.jgss \
			--strip-debug --no-man-pages --no-header-files --compress=2 --output "$work/jre" >/dev/null
	else
		command -v java >/dev/null || fail "no Java runtime; apt-get install openjdk-17-jre-headless"
		echo "images: no jlink in $jdk; copying the whole Java runtime" >&2
		cp -r "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" "$work/jre"
		# Debian's runtime links to files of packages that may be absent (src.zip).
		find "$work/jre" -xtype l -delete
	fi
	# -L: Debian's runtime links its configuration in from /etc.
	cp -rL "$work/jre" "$1"
}

build_kafka() {
	local root="$work/kafka" libs
	libs="$(kafka_libs)"
	base_rootfs "$root" kafka 1000 env sed tr
	mkdir -p "$root/opt/kafka/config"
	jre "$root/opt/java"
	cp -rL "$libs" "$root/opt/kafka/libs"
	cp testcontainers/images/kafka/log4j2.properties "$root/opt/kafka/config/"
	cp testcontainers/images/kafka/entrypoint.sh "$root/usr/bin/tarn-entrypoint"
	# The JRE's own libraries find libjvm.so through the java launcher; ldd needs the path.
	LD_LIBRARY_PATH="$root/opt/java/lib/server" copy_libs "$root" /bin/dash "$root"/usr/bin/* $(find "$root/opt/java" -type f \( -name '*.so' -o -path '*/bin/*' \))
	import "$root" "$kafka_image" 1000 var/lib/kafka \
		"ENV PATH=/opt/java/bin:/usr/bin" "USER 1000:1000" "WORKDIR /var/lib/kafka" "EXPOSE 9092" \
		'ENTRYPOINT ["/usr/bin/tarn-entrypoint"]'
}

# go_version is the toolchain's version, e.g. 1.26.8; the image is tagged with its major.minor.
go_version() {
	[[ -x $goroot/bin/go ]] || fail "no Go toolchain in '$goroot'; set TARN_GOROOT"
	sed -n '1s/^go//p' "$goroot/VERSION"
}

# build_go: the toolchain with what go build needs (sources, tools, go.env), not its tests and
# API lists; GOTOOLCHAIN=local so that it never tries to download another.
build_go() {
	local root="$work/go"
	base_rootfs "$root" gopher 1000 mkdir
	mkdir -p "$root/usr/local/go" "$root/etc/ssl/certs" "$root/go"
	tar -C "$goroot" --exclude=./test --exclude=./api --exclude=./doc -cf - . | tar -C "$root/usr/local/go" -xf -
	# The Dockerfile copies the CA roots into the final image, for TLS to Kafka and Postgres.
	cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
	copy_libs "$root" /bin/dash "$root/usr/bin/mkdir"
	import "$root" "$go_image" 0 root \
		"ENV PATH=/usr/local/go/bin:/go/bin:/usr/bin" "ENV GOPATH=/go" "ENV GOTOOLCHAIN=local" "ENV HOME=/root" \
		"WORKDIR /go" 'CMD ["go", "version"]'
}

# build IMAGE FUNCTION INPUTS...: runs FUNCTION unless IMAGE exists and was built from the same
# inputs (files and version strings, hashed into its tarn.inputs label), and says how long it
# took and how big the image is.
build() {
	local image="$1" fn="$2" t0 size have old
	shift 2
	inputs="$(cat scripts/images.sh "$@" | sha256sum | cut -c1-16)"
	have="$(docker image inspect --format '{{index .Config.Labels "tarn.inputs"}}' "$image" 2>/dev/null || true)"
	[[ $have == "$inputs" ]] && return 0
	old="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
	t0=$SECONDS
	"$fn"
	# The image replaced keeps its layers as a dangling image: drop it unless a container uses it.
	[[ -z $old ]] || docker rmi "$old" >/dev/null 2>&1 || true
	size="$(docker image inspect --format '{{.Size}}' "$image")"
	echo "images: built $image in $((SECONDS - t0))s, $((size / 1000000)) MB" >&2
}

command -v docker >/dev/null || fail "docker CLI not found"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || fail "no Docker engine answers at ${DOCKER_HOST:-the default socket}; run scripts/dockerd.sh start"
if (($# == 0)); then
	set -- postgres kafka
fi
exports=()
for want in "$@"; do
	case "$want" in
	postgres)
		pg_bin="/usr/lib/postgresql/$pg_major/bin/postgres"
		build "$pg_image" build_postgres testcontainers/images/postgres/* <("$pg_bin" --version 2>/dev/null || true)
		exports+=("TARN_TEST_POSTGRES_IMAGE=$pg_image")
		;;
	kafka)
		build "$kafka_image" build_kafka testcontainers/images/kafka/* <(ls -l "$(kafka_libs)"; cat "$jdk/release" 2>/dev/null || true)
		exports+=("TARN_TEST_KAFKA_IMAGE=$kafka_image")
		;;
	go)
		gv="$(go_version)"
		go_image="tarn-build/go:$(cut -d. -f1,2 <<<"$gv")"
		build "$go_image" build_go <(echo "$gv")
		exports+=("TARN_GO_IMAGE=$go_image")
		;;
	*) fail "unknown image '$want': want postgres, kafka or go" ;;
	esac
done
echo "export ${exports[*]}"
