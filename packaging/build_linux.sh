#!/usr/bin/env bash
# Build SpecChat's Linux installers (`make installer` runs this):
#   dist/specchat/                      the one-folder application bundle (run dist/specchat/specchat)
#   dist/specchat_<version>_amd64.deb   installs it under /opt/specchat, with /usr/bin/specchat, a menu entry, icons
# Needs python3 >= 3.10 with venv (a build with a shared libpython, as Debian's and pyenv's are), dpkg-deb, ldd,
# and PyPI. The bundle is built in its own environment, build/packaging-venv, holding only SpecChat, PyInstaller and
# pip (never the conversion extra, so torch cannot get in). Environment: PYTHON (default python3), DEB_COMPRESSION
# (dpkg-deb options; default "-Zzstd -z3": 133 MB in 4 s here, where gzip -9 took 60 s for 141 MB. Every system
# with the glibc this bundle needs (>= 2.36: Debian 12, Ubuntu 22.10 and later) has a dpkg that reads zstd).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DEB_COMPRESSION=${DEB_COMPRESSION:--Zzstd -z3}
VENV=build/packaging-venv
BUNDLE=dist/specchat
# Its modification time says when the sources were read; it becomes dist/.sources-stamp once the build succeeded
# (the smoke test reuses a build whose stamp is newer than every source file).
STAMP=build/.sources-stamp
say() { printf '\n== %s\n' "$*"; }
mkdir -p build dist
touch "$STAMP"
rm -f dist/.sources-stamp

# --- the build environment -------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "Creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -e "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ] || [ packaging/requirements.txt -nt "$VENV/.installed" ]; then
  say "Installing SpecChat's dependencies and the build tools into $VENV"
  "$VENV/bin/python" -m pip install --quiet -r packaging/requirements.txt
  "$VENV/bin/python" -m pip install --quiet .
  touch "$VENV/.installed"
fi
say "Installing this checkout of SpecChat into $VENV"
"$VENV/bin/python" -m pip install --quiet --no-deps --force-reinstall .
"$VENV/bin/python" - <<'EOF'
import importlib.util, sys
found = [m for m in ("torch", "transformers", "optimum", "nncf") if importlib.util.find_spec(m)]
if found:
    sys.exit(f"error: build/packaging-venv holds {', '.join(found)} (the conversion extra), which must not be "
             "bundled: delete build/packaging-venv and run this again")
EOF

say "Building SpecChat's CPU kernels against $VENV's OpenVINO (shipped when g++ is here)"
"$VENV/bin/python" tools/build_kernels.py

# --- the bundle ----------------------------------------------------------------------------------------------
say "Building the bundle $BUNDLE with PyInstaller"
"$VENV/bin/pyinstaller" packaging/specchat.spec --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller
if find "$BUNDLE" -ipath '*torch*' | grep -q .; then
  echo "error: the bundle contains torch files:" >&2
  find "$BUNDLE" -ipath '*torch*' | head >&2
  exit 1
fi

# --- the .deb -------------------------------------------------------------------------------------------
VERSION=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("specchat"))')
DEB=dist/specchat_${VERSION}_amd64.deb
STAGE=build/deb/specchat_${VERSION}_amd64
say "Building $DEB"
rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN" "$STAGE/opt" "$STAGE/usr/bin" "$STAGE/usr/share/applications" "$STAGE/usr/share/doc/specchat"
cp -a "$BUNDLE" "$STAGE/opt/specchat"
install -m 755 packaging/linux/specchat.sh "$STAGE/usr/bin/specchat"
install -m 644 packaging/linux/specchat.desktop "$STAGE/usr/share/applications/specchat.desktop"
"$VENV/bin/python" packaging/make_icons.py hicolor "$STAGE/usr/share/icons/hicolor"
install -m 644 LICENSE "$STAGE/usr/share/doc/specchat/copyright"
install -m 644 THIRD_PARTY_NOTICES.md "$STAGE/usr/share/doc/specchat/THIRD_PARTY_NOTICES.md"
if command -v desktop-file-validate >/dev/null 2>&1; then
  desktop-file-validate "$STAGE/usr/share/applications/specchat.desktop"
fi

# Depends: the Debian packages of the libraries the bundle links to but does not carry (libc, GL/EGL, xcb, Wayland),
# found like dpkg-shlibdeps does: ldd on every binary, with the bundle's own folders searched first; libc6 at least
# the newest glibc symbol version any binary uses; and fontconfig-config, the configuration (and through it the
# fonts) that the bundled libfontconfig reads. Qt's X11 plugin's libraries (app.gui.display_check.XCB_LIBRARIES, the
# list the window checks before it starts) are added by name: ldd drops a library missing on the build machine.
binaries() { find "$BUNDLE" -type f \( -name '*.so*' -o -path "$BUNDLE/specchat" \) -print0; }
library_dirs=$(find "$BUNDLE" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
system_libraries=$(binaries | LD_LIBRARY_PATH=$library_dirs xargs -0 ldd 2>/dev/null \
  | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | grep -v "^$(realpath "$BUNDLE")" | grep -v "^$BUNDLE" | sort -u)
glibc=$(binaries | xargs -0 grep -aoh 'GLIBC_2\.[0-9]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1)
packages=""
for library in $system_libraries; do
  owner=$(dpkg -S "$library" 2>/dev/null || dpkg -S "/usr$library" 2>/dev/null || dpkg -S "${library#/usr}" 2>/dev/null) \
    || { echo "error: no Debian package provides $library, which the bundle links to" >&2; exit 1; }
  packages="$packages ${owner%%:*}"
done
packages="$packages $("$VENV/bin/python" -c 'from app.gui.display_check import xcb_packages; print(*xcb_packages())')"
EMOJI_FONT=$("$VENV/bin/python" -c 'from app.gui.display_check import EMOJI_FONT_PACKAGE; print(EMOJI_FONT_PACKAGE)')
DEPENDS=$(printf '%s\n' $packages fontconfig-config | sort -u | sed "s/^libc6\$/libc6 (>= $glibc)/" | paste -sd, | sed 's/,/, /g')

INSTALLED_KB=$(du -sk --apparent-size --exclude=DEBIAN "$STAGE" | cut -f1)
cat > "$STAGE/DEBIAN/control" <<EOF
Package: specchat
Version: $VERSION
Architecture: amd64
Maintainer: SpecChat developers <specchat@users.noreply.github.com>
Installed-Size: $INSTALLED_KB
Depends: $DEPENDS
Recommends: $EMOJI_FONT
Section: utils
Priority: optional
Description: desktop chat with local LLMs on OpenVINO
 SpecChat runs large language models on the CPU with OpenVINO: low-bit
 weights, speculative decoding and an attention-sink rolling context.
 It fetches its default model, SmolLM2-135M-Instruct, on first start.
 The application is installed in /opt/specchat; the specchat command
 line generates, chats and manages models.
EOF
# The menu and icon caches are refreshed by the dpkg triggers of desktop-file-utils and hicolor-icon-theme:
# no maintainer scripts are needed. Per-user data (~/.local/share/specchat) stays when the package is removed.
# shellcheck disable=SC2086 # DEB_COMPRESSION holds several options
dpkg-deb --root-owner-group $DEB_COMPRESSION --build "$STAGE" "$DEB" >/dev/null
rm -rf "$STAGE"
mv "$STAMP" dist/.sources-stamp
say "Done"
du -sh "$BUNDLE" "$DEB"
