#!/bin/sh
# /usr/bin/specchat: SpecChat is installed in /opt/specchat (the .deb built by packaging/build_linux.sh).
exec /opt/specchat/specchat "$@"
