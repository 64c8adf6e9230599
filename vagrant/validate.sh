#!/usr/bin/env bash
# vagrant/validate.sh -- check vagrant/Vagrantfile for BOTH providers, without a box or a VM.
#
# `vagrant validate` only checks the block of the provider it is run for (the default
# provider: libvirt when vagrant-libvirt is installed), so a typo in the other block passes.
# This script validates once per provider, then proves the check bites: it validates a copy
# of the Vagrantfile with a misspelt setting in each provider block and fails unless vagrant
# rejects both copies.
#
# Installs vagrant and vagrant-libvirt from apt if vagrant is missing (not in the default CI
# path, docs/vagrant.md). Downloads no box and boots nothing: what it cannot check is listed
# in docs/vagrant.md.
set -euo pipefail
cd "$(dirname "$0")"

log() { printf '[validate %s] %s\n' "$(date +%T)" "$*"; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo

if ! command -v vagrant >/dev/null; then
    log "vagrant missing: apt-get install vagrant vagrant-libvirt"
    t0=$(date +%s)
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        vagrant vagrant-libvirt >/dev/null
    log "installed in $(($(date +%s) - t0)) s"
fi
log "$(vagrant --version), plugins: $(vagrant plugin list 2>/dev/null | tr '\n' ' ')"

# Vagrant keeps its per-project state in .vagrant/ next to the Vagrantfile: use a temp dir.
tmp=$(mktemp -d)
copy=""
cleanup() { rm -rf "$tmp"; [ -z "$copy" ] || rm -f "$copy"; }
trap cleanup EXIT
export VAGRANT_DOTFILE_PATH=$tmp/dotfile

# Without VirtualBox, its provider refuses to load ("Vagrant could not detect VirtualBox")
# before validating anything. A stub VBoxManage that only answers --version lets vagrant
# validate the block; validate asks it for nothing else (logged and checked below).
if ! command -v VBoxManage >/dev/null; then
    mkdir "$tmp/bin"
    {
        echo '#!/bin/sh'
        echo "echo \"\$*\" >>'$tmp/vboxmanage.calls'"
        echo '[ "$*" = --version ] && echo 7.0.14r161095 && exit 0'
        echo 'echo "VBoxManage stub (vagrant/validate.sh): $* not implemented" >&2; exit 1'
    } >"$tmp/bin/VBoxManage"
    chmod +x "$tmp/bin/VBoxManage"
    export PATH=$tmp/bin:$PATH
    log "VirtualBox not installed: using a VBoxManage stub that answers --version only"
fi

PROVIDERS=(libvirt virtualbox)
declare -A TYPO=([libvirt]='s/lv\.cpus =/lv.cpuz =/' [virtualbox]='s/vb\.memory =/vb.memroy =/')

# validate PROVIDER [VAGRANTFILE-NAME]: vagrant's exit status, its output on stdout
validate() {
    VAGRANT_DEFAULT_PROVIDER=$1 VAGRANT_VAGRANTFILE=${2:-Vagrantfile} vagrant validate 2>&1
}

fail=0
for p in "${PROVIDERS[@]}"; do
    if out=$(validate "$p"); then
        log "$p: $out"
    else
        log "$p: FAILED"
        printf '%s\n' "$out"
        fail=1
    fi
done

# The self-test: a copy with a misspelt setting in one provider block must fail for that
# provider. The copy sits next to the Vagrantfile so that relative paths resolve the same way.
copy=$(mktemp .Vagrantfile.typo.XXXXXX)
for p in "${PROVIDERS[@]}"; do
    sed "${TYPO[$p]}" Vagrantfile >"$copy"
    if cmp -s Vagrantfile "$copy"; then
        log "self-test $p: the typo pattern '${TYPO[$p]}' no longer matches the Vagrantfile: update it"
        fail=1
    elif out=$(validate "$p" "$copy"); then
        log "self-test $p: a misspelt setting in the $p block PASSED validation: this check is blind"
        fail=1
    elif grep -q "shouldn't exist" <<<"$out"; then
        log "self-test $p: misspelt setting rejected as expected: $(grep -m1 "shouldn't exist" <<<"$out")"
    else
        log "self-test $p: validation failed, but not on the misspelt setting:"
        printf '%s\n' "$out"
        fail=1
    fi
done

if [ -e "$tmp/vboxmanage.calls" ] && grep -qvx -- '--version' "$tmp/vboxmanage.calls"; then
    log "the VBoxManage stub was asked for more than --version: $(sort -u "$tmp/vboxmanage.calls" | tr '\n' ' ')"
    fail=1
fi

if [ "$fail" -ne 0 ]; then
    log "FAILED"
    exit 1
fi
log "ok: Vagrantfile valid for ${PROVIDERS[*]}; a misspelt setting in either block is caught"
