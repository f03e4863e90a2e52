// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Skillbus",
    products: [
        .library(name: "Skillbus", targets: ["Skillbus"]),
        .library(name: "SkillbusZMQ", targets: ["SkillbusZMQ"]),
        .executable(name: "skillbus", targets: ["skillbus"]),
    ],
    targets: [
        // libzmq from Debian's libzmq3-dev, found through pkg-config.
        .systemLibrary(
            name: "CZeroMQ",
            pkgConfig: "libzmq",
            providers: [.apt(["libzmq3-dev"])]
        ),
        // SQLite from Debian's libsqlite3-dev, found through pkg-config: the agents' context stores.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .target(name: "SkillbusZMQ", dependencies: ["CZeroMQ"]),
        .target(name: "Skillbus", dependencies: ["SkillbusZMQ", "CSQLite"]),
        .target(name: "SkillbusCommands", dependencies: ["Skillbus", "SkillbusZMQ"]),
        .executableTarget(name: "skillbus", dependencies: ["SkillbusCommands", "CZeroMQ"]),
        .testTarget(name: "SkillbusTests", dependencies: ["Skillbus", "SkillbusZMQ", "SkillbusCommands"]),
        .testTarget(name: "SkillbusIntegrationTests", dependencies: ["Skillbus", "SkillbusZMQ", "SkillbusCommands"]),
    ],
    swiftLanguageModes: [.v6]
)
