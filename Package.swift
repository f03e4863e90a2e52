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
        // libsodium from Debian's libsodium-dev, found through pkg-config: the boxes of CURVE in the own ZMTP engine.
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]
        ),
        // Linux headers Swift's Glibc module lacks (epoll for the own ZMTP engine) and a line-buffered stdout.
        .systemLibrary(name: "CLinux"),
        // SQLite from Debian's libsqlite3-dev, found through pkg-config: the agents' context stores.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // libpq from Debian's libpq-dev, found through pkg-config: a coordinator group's journal and its leader
        // election in PostgreSQL (the `ha` setting).
        .systemLibrary(
            name: "CPostgres",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        // libcurl, loaded with dlopen when the openai planner first needs it (its header curl/curl.h at build time,
        // from libcurl4-openssl-dev; no link): the binary starts on a host without it.
        .target(name: "CCurlRuntime"),
        .target(name: "SkillbusZMQ", dependencies: ["CZeroMQ", "CLinux", "CSodium"]),
        .target(name: "Skillbus", dependencies: ["SkillbusZMQ", "CSQLite", "CPostgres", "CCurlRuntime"]),
        .target(name: "SkillbusCommands", dependencies: ["Skillbus", "SkillbusZMQ"]),
        .executableTarget(name: "skillbus", dependencies: ["SkillbusCommands", "CLinux"]),
        // What only the tests and the team's perf tool use: never part of the skillbus binary.
        .target(name: "SkillbusTestSupport", dependencies: ["Skillbus", "SkillbusCommands"]),
        // skillbus-perf, the team's benchmark (make bench): every figure the performance work tracks, measured
        // on the skillbus it is given.
        .target(
            name: "SkillbusPerf",
            dependencies: ["Skillbus", "SkillbusZMQ", "SkillbusCommands", "SkillbusTestSupport", "CZeroMQ"]),
        .executableTarget(name: "skillbus-perf", dependencies: ["SkillbusPerf", "CLinux"]),
        .testTarget(name: "SkillbusTests", dependencies: ["Skillbus", "SkillbusZMQ", "SkillbusCommands"]),
        .testTarget(
            name: "SkillbusIntegrationTests",
            dependencies: ["Skillbus", "SkillbusZMQ", "SkillbusCommands", "SkillbusTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
