// swift-tools-version: 6.0
import PackageDescription

let strict: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny")]

let package = Package(
    name: "Tracker",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "tracker-gateway", targets: ["Gateway"]),
        .executable(name: "tracker-filter", targets: ["Filter"]),
        .executable(name: "tracker-motion", targets: ["Motion"]),
        .executable(name: "tracker-track", targets: ["Track"]),
        .executable(name: "tracker-uploader", targets: ["Uploader"]),
        .executable(name: "tracker-http", targets: ["HTTP"]),
        .executable(name: "trackerctl", targets: ["Ctl"]),
        .executable(name: "tracker-bench", targets: ["Bench"]),
    ],
    targets: [
        // System libraries: a modulemap and a shim header, nothing else.
        .systemLibrary(name: "CMosquitto", path: "Shared/CMosquitto", pkgConfig: "libmosquitto",
                       providers: [.apt(["libmosquitto-dev"])]),
        .systemLibrary(name: "CSQLite", path: "Shared/CSQLite", pkgConfig: "sqlite3",
                       providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CMalloc", path: "Shared/CMalloc"),
        .systemLibrary(name: "CCurl", path: "Shared/CCurl", pkgConfig: "libcurl",
                       providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", path: "Shared/CMicroHTTPD", pkgConfig: "libmicrohttpd",
                       providers: [.apt(["libmicrohttpd-dev"])]),

        // Shared modules.
        .target(name: "Model", path: "Shared/Model", swiftSettings: strict),
        .target(name: "TrackerLog", path: "Shared/TrackerLog", swiftSettings: strict),
        .target(name: "Bus", dependencies: ["CMosquitto", "TrackerLog"], path: "Shared/Bus", swiftSettings: strict),
        .target(name: "Store", dependencies: ["CSQLite", "TrackerLog"], path: "Shared/Store", swiftSettings: strict),
        .target(name: "Runtime", dependencies: ["Model", "TrackerLog", "Bus", "Store", "CMalloc"], path: "Shared/Runtime",
                swiftSettings: strict),
        // Outgoing HTTP (libcurl): its own module, so that only the services
        // that call out (track, uploader) load libcurl and its TLS stack.
        .target(name: "OutboundHTTP", dependencies: ["CCurl", "Model"], path: "Shared/OutboundHTTP", swiftSettings: strict),
        .target(name: "TestSupport", dependencies: ["Model", "Bus", "Runtime", "FilterCore", "MotionCore", "TrackCore"], path: "Shared/TestSupport",
                swiftSettings: strict),

        // Services: a pure core and the executable that wires it.
        .target(name: "GatewayCore", dependencies: ["Model"], path: "Services/Gateway/GatewayCore",
                swiftSettings: strict),
        .executableTarget(name: "Gateway", dependencies: ["GatewayCore", "Runtime"],
                          path: "Services/Gateway/Gateway", swiftSettings: strict),
        .target(name: "FilterCore", dependencies: ["Model"], path: "Services/Filter/FilterCore",
                swiftSettings: strict),
        .executableTarget(name: "Filter", dependencies: ["FilterCore", "Runtime"],
                          path: "Services/Filter/Filter", swiftSettings: strict),
        .target(name: "MotionCore", dependencies: ["Model"], path: "Services/Motion/MotionCore",
                swiftSettings: strict),
        .executableTarget(name: "Motion", dependencies: ["MotionCore", "Runtime"],
                          path: "Services/Motion/Motion", swiftSettings: strict),
        .target(name: "TrackCore", dependencies: ["Model"], path: "Services/Track/TrackCore", swiftSettings: strict),
        .executableTarget(name: "Track", dependencies: ["TrackCore", "Runtime", "OutboundHTTP"], path: "Services/Track/Track", swiftSettings: strict),
        .target(name: "UploaderCore", dependencies: ["Model"], path: "Services/Uploader/UploaderCore", swiftSettings: strict),
        .executableTarget(name: "Uploader", dependencies: ["UploaderCore", "Runtime", "OutboundHTTP"], path: "Services/Uploader/Uploader", swiftSettings: strict),
        .target(name: "HTTPCore", dependencies: ["Model"], path: "Services/HTTP/HTTPCore", swiftSettings: strict),
        .executableTarget(name: "HTTP", dependencies: ["HTTPCore", "Runtime", "CMicroHTTPD"], path: "Services/HTTP/HTTP", swiftSettings: strict),
        .executableTarget(name: "Ctl", dependencies: ["Model", "Bus", "Runtime", "TrackCore"], path: "Services/Ctl",
                          swiftSettings: strict),
        .executableTarget(name: "Bench", dependencies: ["Model", "TrackerLog", "Bus", "Store", "Runtime", "TestSupport", "FilterCore", "MotionCore", "TrackCore"],
                          path: "Benchmarks/Bench", swiftSettings: strict),

        // Tests.
        .testTarget(name: "ModelTests", dependencies: ["Model", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "RuntimeTests", dependencies: ["Runtime", "Store", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "StoreTests", dependencies: ["Store"], swiftSettings: strict),
        .testTarget(name: "GatewayCoreTests", dependencies: ["GatewayCore", "TestSupport"],
                    swiftSettings: strict),
        .testTarget(name: "FilterCoreTests", dependencies: ["FilterCore", "TestSupport"],
                    swiftSettings: strict),
        .testTarget(name: "MotionCoreTests", dependencies: ["MotionCore", "FilterCore", "TestSupport"],
                    swiftSettings: strict),
        .testTarget(name: "UploaderCoreTests", dependencies: ["UploaderCore"], swiftSettings: strict),
        .testTarget(name: "HTTPCoreTests", dependencies: ["HTTPCore"], swiftSettings: strict),
        .testTarget(name: "TrackCoreTests", dependencies: ["TrackCore", "FilterCore", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "ServiceTests", dependencies: ["Gateway", "Filter", "Motion", "Track", "Uploader", "Runtime", "TestSupport"],
                    swiftSettings: strict),
        .testTarget(name: "EndToEndTests",
                    dependencies: ["Model", "Bus", "TestSupport", "FilterCore", "Gateway", "Filter", "Motion", "Track", "Ctl", "HTTP"],
                    swiftSettings: strict),
    ],
    swiftLanguageModes: [.v6]
)
