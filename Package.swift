// swift-tools-version:6.2
import PackageDescription

// The library needs only libevent and the toolchain: this package declares no package
// dependencies. The CLI, its measurements and the micro-benchmarks live in Benchmarks/, a
// package of their own that depends on this one by path (`make test` checks a client's
// graph with scripts/check-client-dependencies.sh).
let strictSwift: [SwiftSetting] = [
    .treatAllWarnings(as: .error),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Metronome",
    products: [
        .library(name: "Metronome", targets: ["Metronome"]),
        .library(name: "MetronomeTesting", targets: ["MetronomeTesting"]),
        // The documented C API (CSupport/CMetronome/include/CMetronome.h), for callers that
        // measure or drive the firing core itself, as `metronome scale` does. A product
        // rather than `@_spi`: SPI cannot carry a C module's functions across packages, and
        // the header is already the core's documented contract. It needs libevent only.
        .library(name: "CMetronome", targets: ["CMetronome"]),
        // Runs a package's executables from its tests. A product only so that the
        // Benchmarks package's CLI tests share it; it is not part of the library's API.
        .library(name: "MetronomeTestSupport", targets: ["MetronomeTestSupport"]),
    ],
    targets: [
        .systemLibrary(
            name: "CLibevent",
            path: "CSupport/CLibevent",
            pkgConfig: "libevent",
            providers: [.apt(["libevent-dev"])]
        ),
        .target(
            name: "CMetronome",
            dependencies: ["CLibevent"],
            path: "CSupport/CMetronome",
            cSettings: [.define("_GNU_SOURCE")]
        ),
        .target(name: "Metronome", dependencies: ["CMetronome"], swiftSettings: strictSwift),
        .target(name: "MetronomeTesting", dependencies: ["Metronome"], swiftSettings: strictSwift),
        // Runs one libdispatch crash pattern per process, so tests can show it dies raw and
        // survives through SafeDispatchTimer (Tests/MetronomeTests/CrashPatternTests.swift).
        .executableTarget(
            name: "metronome-crash-patterns",
            dependencies: ["Metronome"],
            path: "Tests/CrashPatterns",
            swiftSettings: strictSwift
        ),
        // Finds and runs the package's executables from tests.
        .target(name: "MetronomeTestSupport", path: "Tests/TestSupport", swiftSettings: strictSwift),
        .testTarget(name: "CMetronomeTests", dependencies: ["CMetronome"]),
        .testTarget(
            name: "MetronomeTests",
            dependencies: ["Metronome", "MetronomeTesting", "MetronomeTestSupport"]
        ),
        .testTarget(name: "MetronomePatternsTests", dependencies: ["Metronome", "MetronomeTesting"]),
        .testTarget(name: "MetronomeStressTests", dependencies: ["Metronome"]),
    ],
    swiftLanguageModes: [.v6]
)
