; Inno Setup 6 script of SpecChat's Windows installer. packaging\windows\build.ps1 builds the bundle
; (dist\specchat\) and the icon (build\windows\specchat.ico), then compiles this with:
;     iscc /DAppVersion=<version from pyproject.toml> packaging\windows\specchat.iss
; The result is dist\SpecChat-<version>-setup.exe. It installs per user (no administrator rights needed) or,
; when the user chooses so in the first dialog, for all users under Program Files.

#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=0.1.0 packaging\windows\specchat.iss
#endif
#define Root "..\.."

[Setup]
AppId={{7D0E3B8C-3C55-4C38-9A4E-2F7B0E6C1A51}
AppName=SpecChat
AppVersion={#AppVersion}
AppVerName=SpecChat {#AppVersion}
AppPublisher=SpecChat developers
DefaultDirName={autopf}\SpecChat
DefaultGroupName=SpecChat
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
LicenseFile={#Root}\LICENSE
SetupIconFile={#Root}\build\windows\specchat.ico
UninstallDisplayIcon={app}\specchatw.exe
OutputDir={#Root}\dist
OutputBaseFilename=SpecChat-{#AppVersion}-setup
Compression=lzma2/fast
SolidCompression=yes
WizardStyle=modern

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
; The whole one-folder bundle: specchat.exe (the command line), specchatw.exe (the window), _internal\.
Source: "{#Root}\dist\specchat\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\SpecChat"; Filename: "{app}\specchatw.exe"; WorkingDir: "{app}"
Name: "{autodesktop}\SpecChat"; Filename: "{app}\specchatw.exe"; WorkingDir: "{app}"; Tasks: desktopicon

[Run]
Filename: "{app}\specchatw.exe"; Description: "{cm:LaunchProgram,SpecChat}"; Flags: nowait postinstall skipifsilent

; The uninstaller removes what it installed; models and chats in %LOCALAPPDATA%\specchat stay, like the user's
; other documents (delete that folder to remove them too).
