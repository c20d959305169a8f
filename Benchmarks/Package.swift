// swift-tools-version:6.2
import PackageDescription

// Everything that measures Metronome, in a package of its own so that a client of the
// library resolves no third-party package: the `metronome` CLI and its measurements
// (swift-argument-parser, hdrhistogram-swift), the micro-benchmarks (ordo-one/benchmark),
// and the tests that need them (swift-async-algorithms; swift-log, swift-metrics and
// swift-service-lifecycle, with the root's `Logging`, `Metrics` and `ServiceLifecycle`
// traits on, beside its defaults: naming traits replaces them, and `Engine` is one). It
// depends on the root by path.
// From the root: `make jitter`, `make bench`, `make test`.
//
// `MallocInterposer` is ordo-one/benchmark's malloc-statistics backend on Swift 6.3+; naming
// the traits explicitly also leaves out `RuntimeInterposer` (swift-runtime-interposer),
// which only feeds the ARC metrics these benchmarks do not use.
let strictSwift: [SwiftSetting] = [
    .treatAllWarnings(as: .error),
    .enableUpcomingFeature("ExistentialAny"),
]

/// A product of the root package: the library under measurement and its test kits.
func rootProduct(_ name: String) -> Target.Dependency {
    .product(name: name, package: "Metronome")
}

/// SwiftNIO's event loop, a backend the measurements compare against.
let nio: [Target.Dependency] = [
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "NIOPosix", package: "swift-nio"),
]

let package = Package(
    name: "MetronomeBenchmarks",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "metronome", targets: ["metronome"])
    ],
    dependencies: [
        .package(name: "Metronome", path: "..", traits: [.defaults, "Logging", "Metrics", "ServiceLifecycle"]),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-async-algorithms", from: "1.1.4"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        // The Linux calls SwiftGlibc does not import: timerfd, gettid, prctl and malloc_trim.
        .target(name: "CMeasurements", cSettings: [.define("_GNU_SOURCE")]),
        .target(
            name: "MetronomeMeasurements",
            dependencies: [
                "CMeasurements",
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                rootProduct("_MetronomeTestSupport"),
            ] + nio,
            swiftSettings: strictSwift
        ),
        // The stress oracle and the scale probes: what `metronome stress` and `metronome scale`
        // run, as a library so that tests run them in-process.
        .target(
            name: "MetronomeWorkloads",
            dependencies: [
                "CMeasurements",
                "MetronomeMeasurements",
                rootProduct("Metronome"),
                rootProduct("CMetronome"),
                // TimerContract: the stress shadow's expected outcomes.
                rootProduct("MetronomeTesting"),
            ] + nio,
            swiftSettings: strictSwift
        ),
        .executableTarget(
            name: "metronome",
            dependencies: [
                "MetronomeMeasurements",
                "MetronomeWorkloads",
                rootProduct("Metronome"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictSwift
        ),
        .executableTarget(
            name: "MetronomeBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                rootProduct("Metronome"),
                rootProduct("MetronomeTesting"),
                rootProduct("_MetronomeTestSupport"),
                rootProduct("MetronomeObservability"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ] + nio,
            path: "Benchmarks/MetronomeBenchmarks",
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark")
            ]
        ),
        .testTarget(
            name: "MetronomeMeasurementsTests",
            dependencies: ["MetronomeMeasurements", rootProduct("_MetronomeTestSupport")]
        ),
        .testTarget(
            name: "MetronomeWorkloadsTests",
            dependencies: [
                "MetronomeWorkloads", "MetronomeMeasurements", rootProduct("Metronome"),
            ]
        ),
        // Runs the built `metronome` as a child process.
        .testTarget(
            name: "MetronomeCLITests",
            dependencies: [rootProduct("_MetronomeTestSupport")]
        ),
        // A timer whose handlers run on a real NIO event loop.
        .testTarget(name: "EventLoopDeliveryTests", dependencies: [rootProduct("Metronome")] + nio),
        .testTarget(
            name: "EngineClockAsyncAlgorithmsTests",
            dependencies: [
                "MetronomeMeasurements",
                rootProduct("Metronome"),
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
            ]
        ),
        .testTarget(
            name: "MetronomeObservabilityTests",
            dependencies: [
                rootProduct("Metronome"),
                rootProduct("MetronomeObservability"),
                rootProduct("MetronomeTesting"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
