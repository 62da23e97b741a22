# tarn: a static binary on an empty base, run as a non-root user.
# Build: docker build -t tarn .   (docker-compose.yml uses this file)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/tarn ./cmd/tarn && \
    mkdir -p /out/data

FROM scratch
COPY --from=build /out/tarn /tarn
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
WORKDIR /data
EXPOSE 8080
ENTRYPOINT ["/tarn"]
CMD ["version"]
