#!/usr/bin/env bash
# Regenerates internal/envdpb from proto/ with buf, protoc-gen-go and
# protoc-gen-connect-go, all at the versions pinned in tools/go.mod, so every
# developer and CI produce byte-identical code. protoc is not needed. Then
# the README's settings table from internal/settings.
set -euo pipefail

tools_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_dir="$(dirname "$tools_dir")"
bin_dir="$(mktemp -d)"
trap 'rm -rf "$bin_dir"' EXIT

# Build the plugins into a private bin dir: buf finds "local" plugins on PATH.
(cd "$tools_dir" && go build -o "$bin_dir/" \
  github.com/bufbuild/buf/cmd/buf \
  google.golang.org/protobuf/cmd/protoc-gen-go \
  connectrpc.com/connect/cmd/protoc-gen-connect-go)

export PATH="$bin_dir:$PATH"
cd "$repo_dir/proto"
buf lint
buf generate
gofmt -l "$repo_dir/internal/envdpb" | (! grep .) || { echo "generated code is not gofmt-clean" >&2; exit 1; }
echo "generated into $repo_dir/internal/envdpb"
(cd "$repo_dir" && go run ./internal/settings/readmegen README.md)
echo "generated the settings table in $repo_dir/README.md"
