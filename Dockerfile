# The ipybox image: the MCP server (`ipybox mcp`) with a Debian Python
# runtime, and the default image of the container backend (--container-tag).
#
#   docker run -i --rm --user "$(id -u):$(id -g)" -v "$PWD":/app/workspace ipybox   # MCP over stdio
#   docker run --rm --user "$(id -u):$(id -g)" -p 127.0.0.1:8080:8080 -v "$PWD":/app/workspace \
#     -v "$PWD/token":/ipybox/token:ro ipybox \
#     mcp --workspace /app/workspace --no-sandbox --http 0.0.0.0:8080 --auth-token-file /ipybox/token
#
# --user: the server and its kernels run as the owner of the workspace
# (and of the token file), whatever its uid, so that they can write it.
# As root (--user 0:0), ipybox first drops every capability, sets
# no-new-privileges and makes the image's system folders read-only with
# Landlock (IPYBOX_IN_IMAGE). Under any uid, everything the server starts
# (kernels, the fork server, stdio servers, helpers) starts in a scoped
# Landlock domain of its own: no signal to the server (docs/container.md). Without --user the image runs as
# uid 1000, and a workspace that uid cannot write fails at start with the
# docker run --user command that fixes it.
#
# --no-sandbox: the container is the boundary (the image has no bwrap, and
# a sandbox inside a container needs privileges it should not have).
#
# BASE is a Debian bookworm image and GO_IMAGE one with Go on PATH. Where no
# public registry is reachable, scripts/image.sh makes both locally from
# Debian's packages and this machine's Go, and builds with them.
ARG BASE=debian:bookworm-slim
ARG GO_IMAGE=golang:1.27-bookworm
# VERSION is ipybox's release (cmd/ipybox/version.go); scripts/image.sh
# passes it, and it becomes `ipybox version` and the image's version label.
ARG VERSION=devel
# COMMIT is the git commit the source is from (scripts/image.sh passes it;
# the build context has no .git for Go to stamp): `ipybox version` says it.
ARG COMMIT=

FROM ${GO_IMAGE} AS build
ARG VERSION
ARG COMMIT
WORKDIR /src
COPY go.mod go.sum ./
COPY . .
# A vendor/ directory (scripts/image.sh adds one) builds without network.
RUN if [ -d vendor ]; then mod=-mod=vendor; else mod=-mod=readonly; go mod download; fi && \
    CGO_ENABLED=0 go build $mod -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/ipybox ./cmd/ipybox

FROM ${BASE}
# python3-munkres is listed so that it answers fonttools' "scipy | munkres"
# dependency: scipy would pull pythran, boost and a C++ compiler (+1 GB).
RUN apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3-ipykernel python3-matplotlib python3-numpy python3-pandas python3-pydantic python3-dill \
      python3-pip python3-venv python3-munkres ca-certificates >/dev/null && \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
# A fixed non-root user, the default; `docker run --user UID:GID` runs as
# any other (HOME is /tmp, which every uid can write). The container
# backend runs kernels as the calling user's uid (or, under root, the
# workspace owner's or the mapped id) whatever the image says.
# /ipybox holds the server's own files (its config folder, /ipybox/config
# in the image: the approval policy and log, remembered answers, OAuth
# sign-ins; not an ENV, which a container backend's kernels would get): 1777, as /tmp, so
# that any --user makes its 0700 folders there. Nothing the server starts
# may read or write it (Landlock, docs/container.md).
RUN useradd --uid 1000 --user-group --no-create-home --home-dir /tmp ipybox && \
    mkdir -p /app/workspace && chown ipybox:ipybox /app /app/workspace && \
    mkdir -m 1777 /ipybox
COPY --from=build /out/ipybox /usr/local/bin/ipybox
USER ipybox
WORKDIR /app/workspace
ENV LANG=C.UTF-8 HOME=/tmp IPYBOX_IN_IMAGE=1
# The private folder of the host processes ipybox starts, made 0700 by
# ipybox at its start as the ipybox user or root (/app is writable to
# them); under another --user, in $HOME/.cache (/tmp), which the image
# accepts (docs/container.md, "The image").
ENV XDG_RUNTIME_DIR=/app/.run
# The MCP registry checks the image's io.modelcontextprotocol.server.name
# against server.json's name.
ARG VERSION
LABEL org.opencontainers.image.title="ipybox" \
      org.opencontainers.image.description="ipybox MCP server and Python runtime" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/ipybox/ipybox" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.modelcontextprotocol.server.name="io.github.ipybox/ipybox"
ENTRYPOINT ["ipybox"]
CMD ["mcp", "--workspace", "/app/workspace", "--no-sandbox"]
