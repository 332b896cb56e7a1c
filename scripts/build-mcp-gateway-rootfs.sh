#!/usr/bin/env bash
# Writes the root filesystem of Warren's `mcp-gateway` system template as a
# tar file. No third mmdebstrap: it is the code-interpreter-v1 template's
# tar (Debian's packages with Node.js, scripts/build-code-interpreter-rootfs.sh)
# with these entries appended (the later entry of a path wins when a tar is
# unpacked):
#   /usr/local/bin/mcp-gateway   the static gateway (cmd/mcp-gateway)
#   /usr/local/bin/npm, npx      npm from the npm registry, for the gateway's
#                                installs (Debian's Node.js 18 comes without it)
#   /opt/warren/mcp-gateway      npm's cache of every npm server of the
#                                catalog, and the preinstalled ones installed
#                                (mcp-gateway prepare-image)
#   /etc/mcp-gateway, /var/lib/mcp-gateway   root's alone (token, state)
# npm's downloads and the installed servers are kept in $WARREN_NPM_CACHE
# (default ~/.cache/warren-npm) for the next run, which then runs no npm
# for what its lockfiles did not change.
# Usage: scripts/build-mcp-gateway-rootfs.sh OUT.tar CODE_INTERPRETER.tar MCP_GATEWAY_BINARY
set -euo pipefail
out=${1:?usage: $0 OUT.tar CODE_INTERPRETER.tar MCP_GATEWAY_BINARY}
base=${2:?usage: $0 OUT.tar CODE_INTERPRETER.tar MCP_GATEWAY_BINARY}
gw=${3:?usage: $0 OUT.tar CODE_INTERPRETER.tar MCP_GATEWAY_BINARY}
# The newest npm that runs on Debian 12's Node.js 18.
npm_version=10.9.9
cache=${WARREN_NPM_CACHE:-$HOME/.cache/warren-npm}
tmp="$out.tmp.$$"
stage=$(mktemp -d)
trap 'rm -rf "$tmp" "$stage"' EXIT
umask 022
mkdir -p "$cache/catalog" "$cache/servers" "$cache/tools"
root=$stage/opt/warren/mcp-gateway
mkdir -p "$stage/usr/local/bin" "$stage/usr/local/lib/node_modules/npm" "$root/npm-cache" \
  "$stage/etc/mcp-gateway" "$stage/var/lib/mcp-gateway"
install -m 0755 "$gw" "$stage/usr/local/bin/mcp-gateway"

echo "# npm $npm_version"
(cd "$stage" && npm pack --silent --cache "$cache/tools" "npm@$npm_version" >/dev/null)
tar -xzf "$stage/npm-$npm_version.tgz" -C "$stage/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner
rm "$stage/npm-$npm_version.tgz"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$stage/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$stage/usr/local/bin/npx"

echo "# the catalog's servers"
mkdir -p "$root/servers"
cp -a "$cache/catalog/." "$root/npm-cache/"
cp -a "$cache/servers/." "$root/servers/"
"$gw" prepare-image --root "$root"
cp -a "$root/npm-cache/." "$cache/catalog/"
rm -rf "$cache/servers.new" && cp -a "$root/servers" "$cache/servers.new" && rm -rf "$cache/servers" && mv "$cache/servers.new" "$cache/servers"
chmod 0700 "$stage/etc/mcp-gateway" "$stage/var/lib/mcp-gateway"

echo "# $out: $base with the gateway appended"
# POSIX (pax) headers: npm cache paths are longer than the base tar's ustar
# allows, and tar --append keeps the archive's format; so the entries go in
# a tar of their own, concatenated (tar -A drops the first end-of-archive).
tar -cf "$stage/overlay.tar" --format=posix --pax-option=delete=atime,delete=ctime \
  --owner=0 --group=0 --numeric-owner -C "$stage" \
  ./usr/local/bin/mcp-gateway ./usr/local/bin/npm ./usr/local/bin/npx ./usr/local/lib/node_modules \
  ./opt/warren/mcp-gateway ./etc/mcp-gateway ./var/lib/mcp-gateway
cp --reflink=auto "$base" "$tmp"
tar -A -f "$tmp" "$stage/overlay.tar"
mv "$tmp" "$out"
trap - EXIT
rm -rf "$stage"
