#!/bin/sh
# The template's start command: records what it saw, then keeps running.
echo "started in $(pwd) as $(id -un) with $GREETING" > /tmp/started
exec sleep 86400
