# DSpark Studio's Homebrew cask. packaging/fill_cask.py fills in the version, checksum and
# repository of each release from the template packaging/homebrew/dspark-studio.rb, and the release
# workflow attaches the result to the GitHub Release; a tap's Casks/ folder serves it
# (packaging/README.md). Written after Homebrew's Cask Cookbook (docs.brew.sh/Cask-Cookbook).
cask "dspark-studio" do
  version "@VERSION@"
  sha256 "@SHA256@"

  url "https://github.com/@REPOSITORY@/releases/download/v#{version}/DSpark-Studio-#{version}-macOS.zip"
  name "DSpark Studio"
  desc "Speculative decoding with block drafters on MLX, shown as it runs"
  homepage "https://github.com/@REPOSITORY@"

  livecheck do
    url :url
    strategy :github_latest
  end

  # The symbol form: the ">= :sonoma" string form is deprecated (Cask Cookbook, depends_on macos:).
  # release.py checks it against the LSMinimumSystemVersion of the app in the zip.
  depends_on macos: :sonoma
  depends_on arch: :arm64

  app "DSpark Studio.app"

  # What the app writes by itself (app/files/settings.py, dspark/errors.py, dspark/costs.py), never what
  # a person saved: exports are left where they are, and their folder with them.
  zap rmdir: "~/Library/Application Support/dspark-studio",
      trash: [
        "~/Library/Application Support/dspark-studio/runs",
        "~/Library/Caches/dspark",
        "~/Library/Logs/dspark-studio",
        "~/Library/Preferences/com.dspark.DSpark Studio.plist",
        "~/Library/Preferences/org.dspark.studio.plist",
        "~/Library/Saved Application State/org.dspark.studio.savedState",
      ]
end
