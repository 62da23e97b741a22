# tarn: a static binary on an empty base, run as a non-root user.
#
#   docker build -t tarn .                 modules downloaded in the build (needs the module proxy)
#   scripts/tarn-image.sh                  offline: modules vendored into a temporary context, and
#                                          the builder made from this machine's Go (GO_IMAGE)
#
# docker-compose.yml builds this file. Nothing here needs BuildKit, so the legacy builder and
# other builders take it as it is.
ARG GO_IMAGE=golang:1.26

FROM ${GO_IMAGE} AS build
# Marks this stage's image, which a builder without BuildKit keeps untagged, so that
# scripts/tarn-image.sh can remove it (and only it) after a build.
LABEL tarn.stage=build
WORKDIR /src
# Modules first, so that a change of tarn's own code reuses the downloaded modules. VENDORED=1
# (scripts/tarn-image.sh) says the context has vendor/, which go build then reads: no download.
ARG VENDORED=
COPY go.mod go.sum ./
RUN [ -n "$VENDORED" ] || go mod download
COPY . .
# -trimpath and -s -w: no build paths, symbol table nor DWARF in the binary, for a small image.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/tarn ./cmd/tarn && mkdir -p /out/data

FROM scratch
# CA roots for TLS to Kafka and Postgres (sslmode=verify-full); scratch has none.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/tarn /tarn
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
WORKDIR /data
# Inside a container the API must listen beyond loopback; flags and other TARN_ settings still
# win over these.
ENV TARN_HTTP=0.0.0.0:8080 TARN_DATA_DIR=/data
EXPOSE 8080
ENTRYPOINT ["/tarn"]
CMD ["serve"]
