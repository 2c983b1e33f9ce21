# The portcullis daemon as a container image: a static binary on distroless,
# running as an unprivileged user.
#
#   docker build -t portcullis .
#   docker run --rm -p 8080:8080 -v "$PWD/portcullis.yaml:/etc/portcullis/portcullis.yaml:ro" portcullis
#
# The default configuration is examples/container.yaml. The build stage
# compiles for the platform being built (docker buildx build --platform
# linux/amd64,linux/arm64 works without emulating the compiler).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first: this layer stays cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
# VERSION: the release tag "portcullis version" names (deploy/release sets
# it); the context has no .git (see .dockerignore), so the toolchain cannot
# read the tag, and the image reports no VCS revision.
ARG VERSION=
# CGO_ENABLED=0: a static binary that needs no libc in the final image.
# -trimpath: no build machine paths in the binary.
# -pgo: optimized with the daemon's CPU profile (docs/performance.md,
# "Profile-guided optimization").
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -pgo=cmd/portcullis/release.pgo \
    -ldflags="-s -w -X github.com/seed-a07d1050/portcullis/internal/buildinfo.stampedVersion=$VERSION" \
    -o /out/portcullis ./cmd/portcullis
RUN mkdir -p /out/etc/portcullis && cp examples/container.yaml /out/etc/portcullis/portcullis.yaml

# distroless/static: CA certificates (for https upstreams and Redis over
# TLS), tzdata and a passwd with the "nonroot" user, nothing else: no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/portcullis /usr/local/bin/portcullis
COPY --from=build /out/etc/portcullis/ /etc/portcullis/
USER nonroot:nonroot
# The proxy (HTTP, HTTPS and HTTP/3 in the examples) and the admin endpoints.
EXPOSE 8080/tcp 8443/tcp 8443/udp 9901/tcp
ENTRYPOINT ["/usr/local/bin/portcullis"]
CMD ["run", "--config", "/etc/portcullis/portcullis.yaml"]
