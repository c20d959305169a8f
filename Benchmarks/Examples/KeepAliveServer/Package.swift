// swift-tools-version:6.2
import PackageDescription

// An HTTP/1.1 keep-alive server on plain swift-nio that uses Metronome the way a server
// would (idle timeouts, request deadlines, a periodic flush), and the same server on NIO's
// own timers, chosen by `--timers`. A package of its own, so that neither the library nor
// the Benchmarks package resolves what it needs; `make bench-server` and `make
// smoke-server` build and drive it.
let package = Package(
    name: "KeepAliveServer",
    products: [
        .executable(name: "keepalive-server", targets: ["KeepAliveServer"])
    ],
    dependencies: [
        .package(name: "Metronome", path: "../../.."),
        .package(url: "https://github.com/apple/swift-nio", .upToNextMinor(from: "2.101.0")),
    ],
    targets: [
        .executableTarget(
            name: "KeepAliveServer",
            dependencies: [
                .product(name: "Metronome", package: "Metronome"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: [
                .treatAllWarnings(as: .error),
                .enableUpcomingFeature("ExistentialAny"),
            ]
        )
    ],
    swiftLanguageModes: [.v6]
)
