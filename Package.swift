// swift-tools-version:6.2
import PackageDescription

// The library needs only libevent and the toolchain; the CLI's packages are the CLI's
// alone, and the micro-benchmarks live in Benchmarks/ as a package of their own.
let strictSwift: [SwiftSetting] = [
    .treatAllWarnings(as: .error),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Metronome",
    products: [
        .library(name: "Metronome", targets: ["Metronome"]),
        .library(name: "MetronomeTesting", targets: ["MetronomeTesting"]),
        .executable(name: "metronome", targets: ["metronome"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-async-algorithms", from: "1.1.4"),
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
        .target(
            name: "MetronomeMeasurements",
            dependencies: [.product(name: "Histogram", package: "hdrhistogram-swift")],
            swiftSettings: strictSwift
        ),
        .executableTarget(
            name: "metronome",
            dependencies: [
                "Metronome", "MetronomeMeasurements", "CMetronome",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictSwift
        ),
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
        .testTarget(
            name: "MetronomePatternsTests",
            dependencies: ["Metronome", .product(name: "AsyncAlgorithms", package: "swift-async-algorithms")]
        ),
        .testTarget(name: "MetronomeMeasurementsTests", dependencies: ["MetronomeMeasurements"]),
        .testTarget(name: "MetronomeStressTests", dependencies: ["Metronome", "MetronomeTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
