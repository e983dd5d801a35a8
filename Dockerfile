# syntax=docker/dockerfile:1
#
# toolgate container image: one static binary (CGO_ENABLED=0, -trimpath,
# version embedded) on distroless/static, running as the nonroot user.
#
#   docker build --build-arg VERSION=v1.2.3 -t toolgate:v1.2.3 .
#   docker run --init -p 7070:7070 -v toolgate-data:/data \
#     -v "$PWD/toolgate.yaml:/etc/toolgate/toolgate.yaml:ro" toolgate:v1.2.3
#
# The image has no shell, curl or Node: the HEALTHCHECK is toolgate's own
# `healthcheck` subcommand, and stdio upstream servers (npx …) need an image
# of your own FROM this one's build stage plus their runtime. Streamable
# HTTP upstreams need nothing. The store (toolgate.db) and the signing key
# (toolgate.key) default to the working directory, /data: mount a volume.
# Not built in this repository's CI (no registry for the base images there);
# scripts/release.sh builds the same binary and is tested.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/toolgate/toolgate/internal/version.Version=${VERSION}" \
      -o /out/toolgate ./cmd/toolgate \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/toolgate /usr/local/bin/toolgate
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
USER 65532:65532
EXPOSE 7070
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
  CMD ["/usr/local/bin/toolgate", "healthcheck", "--url", "http://127.0.0.1:7070/healthz", "--timeout", "3s"]
ENTRYPOINT ["/usr/local/bin/toolgate"]
# Inside a container the listener must not be loopback only.
CMD ["serve", "--config", "/etc/toolgate/toolgate.yaml", "--listen", "0.0.0.0:7070"]
