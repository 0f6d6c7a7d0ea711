# Build SpecChat's Windows installer: dist\specchat\ (the bundle) and dist\SpecChat-<version>-setup.exe.
# Run from any folder, in PowerShell:  powershell -ExecutionPolicy Bypass -File packaging\windows\build.ps1
# Needs 64-bit Python >= 3.10 (python.org's, or `py -3.12`; set $env:PYTHON to choose) and Inno Setup 6
# (`winget install JRSoftware.InnoSetup`; its iscc.exe on PATH or in its default folder).
$ErrorActionPreference = "Stop"
Set-Location (Resolve-Path "$PSScriptRoot\..\..")
$python = if ($env:PYTHON) { $env:PYTHON } else { "python" }
$venv = "build\packaging-venv-windows"

function Invoke-Checked {
    param([string]$Program, [string[]]$Arguments)
    & $Program @Arguments
    if ($LASTEXITCODE -ne 0) { throw "$Program $($Arguments -join ' ') failed with exit code $LASTEXITCODE" }
}

# A dedicated environment with only SpecChat, PyInstaller and pip: the conversion extra (torch) never gets in.
if (-not (Test-Path "$venv\Scripts\python.exe")) { Invoke-Checked $python @("-m", "venv", $venv) }
$vpython = "$venv\Scripts\python.exe"
Invoke-Checked $vpython @("-m", "pip", "install", "--quiet", "-r", "packaging\requirements.txt")
Invoke-Checked $vpython @("-m", "pip", "install", "--quiet", ".")
Invoke-Checked $vpython @("-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", ".")
Invoke-Checked $vpython @("-c", "import importlib.util, sys; sys.exit(1 if importlib.util.find_spec('torch') else 0)")

# The icon, rendered from resources\specchat.svg (the spec and specchat.iss read build\windows\specchat.ico).
Invoke-Checked $vpython @("packaging\make_icons.py", "ico", "build\windows\specchat.ico")

Invoke-Checked "$venv\Scripts\pyinstaller.exe" @(
    "packaging\specchat.spec", "--noconfirm", "--log-level", "WARN", "--distpath", "dist", "--workpath", "build\pyinstaller-windows"
)
# Smoke check: the bundled command runs and finds its pip.
Invoke-Checked "dist\specchat\specchat.exe" @("--internal-pip", "--version")

$version = & $vpython -c "from importlib.metadata import version; print(version('specchat'))"
$iscc = (Get-Command iscc.exe -ErrorAction SilentlyContinue).Source
if (-not $iscc) { $iscc = "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe" }
if (-not (Test-Path $iscc)) { throw "Inno Setup 6 is not installed (iscc.exe not found): winget install JRSoftware.InnoSetup" }
Invoke-Checked $iscc @("/Qp", "/DAppVersion=$version", "packaging\windows\specchat.iss")
Write-Host "Built dist\specchat\ and dist\SpecChat-$version-setup.exe"
