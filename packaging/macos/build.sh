#!/usr/bin/env bash
# Build SpecChat for macOS: dist/SpecChat.app and dist/SpecChat-<version>-<arch>.dmg (drag to Applications).
# Run on a Mac, from any folder: bash packaging/macos/build.sh
# Needs python3 >= 3.10 (python.org's or Homebrew's; set PYTHON to choose) and the Xcode command line tools
# (iconutil, hdiutil). The app is not signed: to ship it, sign and notarize dist/SpecChat.app
# (codesign --deep --options runtime -s "Developer ID Application: ..."; xcrun notarytool submit ...) before the
# .dmg step, or Gatekeeper asks users to open it with right-click > Open.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
VENV=build/packaging-venv-macos

# A dedicated environment with only SpecChat, PyInstaller and pip: the conversion extra (torch) never gets in.
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet -r packaging/requirements.txt
"$VENV/bin/python" -m pip install --quiet .
"$VENV/bin/python" -m pip install --quiet --no-deps --force-reinstall .
"$VENV/bin/python" -c "import importlib.util, sys; sys.exit('error: torch is installed in $VENV' if importlib.util.find_spec('torch') else 0)"

# The icon, rendered from resources/specchat.svg; the spec reads build/macos/specchat.icns.
rm -rf build/macos/specchat.iconset
"$VENV/bin/python" packaging/make_icons.py iconset build/macos/specchat.iconset
iconutil -c icns build/macos/specchat.iconset -o build/macos/specchat.icns

"$VENV/bin/pyinstaller" packaging/specchat.spec --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller-macos
# Smoke check: the bundled command runs and finds its pip.
dist/SpecChat.app/Contents/MacOS/specchat --internal-pip --version

VERSION=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("specchat"))')
DMG=dist/SpecChat-$VERSION-$(uname -m).dmg
STAGE=build/macos/dmg
rm -rf "$STAGE" "$DMG"
mkdir -p "$STAGE"
cp -R dist/SpecChat.app "$STAGE/"
ln -s /Applications "$STAGE/Applications"
hdiutil create -volname "SpecChat $VERSION" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "$DMG"
rm -rf "$STAGE"
echo "Built dist/SpecChat.app and $DMG"
