#!/bin/sh
# Regenerates the emulator's copies of the Hadoop protos the colinmarc/hdfs
# client speaks. The client's own generated packages are internal to its
# module, so the emulator needs its own. Two things keep them from clashing
# with the client's in the protobuf registry (which would panic at start with
# "proto: file ... is already registered"):
#   - the proto packages are renamed (hadoop.common -> mlfsd.hdfsemu.common,
#     hadoop.hdfs -> mlfsd.hdfsemu.hdfs), so every full message name differs;
#   - the files are registered under different paths (hdfsemu_common/X.proto
#     instead of X.proto), because protoc is run from this directory.
# Neither changes the wire format: protobuf binary encoding carries field
# numbers only. Hadoop RPC names methods and protocols in plain strings.
#
# Needs protoc (Debian: protobuf-compiler) and protoc-gen-go at the version of
# google.golang.org/protobuf in go.mod:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
# Run from anywhere: sh backends/hdfs/hdfsemu/internal/proto/gen.sh
# (or `go generate ./backends/hdfs/hdfsemu/`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here" && go list -m -f '{{.Dir}}' github.com/colinmarc/hdfs/v2)/internal/protocol
mod=github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto

common="RpcHeader ProtobufRpcEngine IpcConnectionContext Security HAServiceProtocol"
hdfs="ClientNamenodeProtocol hdfs datatransfer acl xattr encryption inotify erasurecoding"

rename() { # $1 source file, $2 destination, $3 go package
	perl -pe '
		s/(?<![\w.])hadoop\.(common|hdfs)\b/mlfsd.hdfsemu.$1/g;
		s{^option go_package = .*$}{option go_package = "'"$3"'";};
		s{^import "(RpcHeader|ProtobufRpcEngine|IpcConnectionContext|Security|HAServiceProtocol)\.proto";}{import "hdfsemu_common/$1.proto";};
		s{^import "(ClientNamenodeProtocol|hdfs|datatransfer|acl|xattr|encryption|inotify|erasurecoding)\.proto";}{import "hdfsemu_hdfs/$1.proto";};
	' "$1" > "$2"
}

mkdir -p "$here/hdfsemu_common" "$here/hdfsemu_hdfs"
for f in $common; do rename "$src/hadoop_common/$f.proto" "$here/hdfsemu_common/$f.proto" "$mod/hdfsemu_common"; done
for f in $hdfs; do rename "$src/hadoop_hdfs/$f.proto" "$here/hdfsemu_hdfs/$f.proto" "$mod/hdfsemu_hdfs"; done

cd "$here"
protoc -I . --go_out=. --go_opt=paths=source_relative hdfsemu_common/*.proto hdfsemu_hdfs/*.proto
