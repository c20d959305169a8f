// swift-tools-version:6.2
import PackageDescription

// Micro-benchmarks for Metronome, a package of their own so the library never depends on
// package-benchmark (STYLE §12, as SwiftNIO does). Run with `make bench` from the root.
//
// `MallocInterposer` is ordo-one/benchmark's malloc-statistics backend on Swift 6.3+; naming
// the traits explicitly also leaves out `RuntimeInterposer` (swift-runtime-interposer),
// which only feeds the ARC metrics these benchmarks do not use.
let package = Package(
    name: "MetronomeBenchmarks",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(name: "Metronome", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "MetronomeBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "Metronome", package: "Metronome"),
                .product(name: "MetronomeTesting", package: "Metronome"),
            ],
            path: "Benchmarks/MetronomeBenchmarks",
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark")
            ]
        )
    ],
    swiftLanguageModes: [.v6]
)
