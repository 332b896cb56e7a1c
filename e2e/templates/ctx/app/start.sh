#!/bin/sh
echo "started with $GREETING" > /tmp/started
exec sleep infinity
