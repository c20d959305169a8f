// swift-tools-version:6.2
import PackageDescription

// The library needs only libevent and the toolchain, and libevent only for the engine:
// with the trait `Engine` (on by default on Linux) turned off, the C core is left out and
// GCD fires every timer. Its package dependencies serve only under traits that are off by
// default: swift-log and swift-metrics for `MetronomeObservability` under `Logging` and
// `Metrics`, swift-service-lifecycle under `ServiceLifecycle` (`TimerEngine` as a
// `Service`, and the observability loops ending on graceful shutdown). A client that does
// not enable them resolves none of them. The CLI, its measurements and the micro-benchmarks
// live in Benchmarks/, a package of their own that depends on this one by path (`make test`
// checks a client's graph with scripts/check-client-dependencies.sh).
let strictSwift: [SwiftSetting] = [
    .treatAllWarnings(as: .error),
    .enableUpcomingFeature("ExistentialAny"),
]

// The engine needs timerfd, which Linux alone has: elsewhere (a Mac, where teams develop)
// the trait is off unless a client turns it on, and the library builds on GCD alone.
#if os(Linux)
let engineByDefault: Set<String> = ["Engine"]
#else
let engineByDefault: Set<String> = []
#endif

let package = Package(
    name: "Metronome",
    products: [
        .library(name: "Metronome", targets: ["Metronome"]),
        .library(name: "MetronomeTesting", targets: ["MetronomeTesting"]),
        // An engine's counters as swift-metrics metrics and its events as swift-log log
        // events, under the traits of the same names.
        .library(name: "MetronomeObservability", targets: ["MetronomeObservability"]),
        // The documented C API (CSupport/CMetronome/include/CMetronome.h), for callers that
        // measure or drive the firing core itself, as `metronome scale` does. A product
        // rather than `@_spi`: SPI cannot carry a C module's functions across packages, and
        // the header is already the core's documented contract. It needs libevent only.
        .library(name: "CMetronome", targets: ["CMetronome"]),
        // What tests and measurements share: a lock box to wait on, a gate, `eventually`, a
        // seeded generator, threads, clock readings and conversions, interval stabbing, and
        // running a package's executables. A product so that the Benchmarks package uses the
        // same copy; the underscore says it is not part of the library's API.
        .library(name: "_MetronomeTestSupport", targets: ["MetronomeTestSupport"]),
    ],
    traits: [
        .trait(name: "Engine", description: "The C firing core over timerfd and libevent. Off, GCD fires every timer."),
        .default(enabledTraits: engineByDefault),
        .trait(name: "Logging", description: "MetronomeObservability logs an engine's events through swift-log."),
        .trait(name: "Metrics", description: "MetronomeObservability exports an engine's counters through swift-metrics."),
        .trait(
            name: "ServiceLifecycle",
            description:
                "TimerEngine is a swift-service-lifecycle Service; MetronomeObservability's loops end on graceful shutdown."
        ),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
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
        .target(
            name: "Metronome",
            dependencies: [
                .target(name: "CMetronome", condition: .when(traits: ["Engine"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
            ],
            // Built without the engine on Linux it warns that GCD serves
            // (Sources/Metronome/Vocabulary/EngineTrait.swift), a warning that must stay one.
            swiftSettings: [
                .treatAllWarnings(as: .error, .when(traits: ["Engine"])),
                .enableUpcomingFeature("ExistentialAny"),
            ]
        ),
        .target(name: "MetronomeTesting", dependencies: ["Metronome"], swiftSettings: strictSwift),
        .target(
            name: "MetronomeObservability",
            dependencies: [
                "Metronome",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging"])),
                .product(name: "Metrics", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["ServiceLifecycle"])),
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
        .target(name: "MetronomeTestSupport", path: "Tests/TestSupport", swiftSettings: strictSwift),
        .testTarget(
            name: "CMetronomeTests",
            dependencies: [.target(name: "CMetronome", condition: .when(traits: ["Engine"])), "MetronomeTestSupport"]
        ),
        .testTarget(
            name: "MetronomeTests",
            dependencies: ["Metronome", "MetronomeTesting", "MetronomeTestSupport"]
        ),
        .testTarget(
            name: "MetronomePatternsTests",
            dependencies: ["Metronome", "MetronomeTesting", "MetronomeTestSupport"]
        ),
        .testTarget(name: "MetronomeStressTests", dependencies: ["Metronome", "MetronomeTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
