#!/bin/sh
# Rebuilds oslens.bpf.o (committed beside its source, so building oslens needs no clang):
# CO-RE against this kernel's BTF; the object loads on any kernel with BTF (5.5+ for tp_btf).
# Needs: clang (14+), libbpf-dev (bpf_helpers.h), bpftool. Debian: apt-get install clang libbpf-dev bpftool
set -e
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$tmp/vmlinux.h"
clang -O2 -g -target bpf -mcpu=v3 -D__TARGET_ARCH_x86 -I"$tmp" -c "$here/oslens.bpf.c" -o "$tmp/oslens.bpf.o"
llvm-strip -g "$tmp/oslens.bpf.o" 2>/dev/null || true
cp "$tmp/oslens.bpf.o" "$here/oslens.bpf.o"
echo "built $here/oslens.bpf.o"
