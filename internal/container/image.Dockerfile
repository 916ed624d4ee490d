# The default kernel image (ipybox:latest), as ipybox builds it on the first
# use of --container-tag when it is missing (internal/container.BuildImage):
# the final stage of the repository's Dockerfile, with the running ipybox
# binary copied from the build context instead of built by a Go stage (an
# installed ipybox has no source). TestImageDockerfileMatchesRepository
# keeps the two equal, so that the steps share the daemon's cache with
# scripts/image.sh's build.
ARG BASE=debian:bookworm-slim
ARG VERSION=devel

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
COPY ipybox /usr/local/bin/ipybox
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
