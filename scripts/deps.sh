#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test tarn: Postgres server binaries (Debian's
# postgresql package), a Java runtime and Maven, the Kafka broker jars (into a cache outside the
# repository) and the Go modules. Idempotent, and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v runuser >/dev/null || missing+=(util-linux)
# The web page's test drives headless Chromium.
command -v chromium >/dev/null || missing+=(chromium)

if ((${#missing[@]})); then
	echo "deps: installing ${missing[*]} from Debian's packages" >&2
	sudo=""
	[[ $(id -u) -eq 0 ]] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

scripts/kafka-jars.sh >/dev/null
go mod download
