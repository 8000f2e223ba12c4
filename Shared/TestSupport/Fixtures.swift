import Foundation
import Model

/// The checkout the tests and benchmarks were built from.
public enum Repository {
    /// Shared/TestSupport/Fixtures.swift → the package root.
    public static var root: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }
}

/// The project's recordings (`Fixtures/` at the package root, or `TRACKER_FIXTURES`).
public enum Fixtures {
    public static var directory: URL {
        if let override = ProcessInfo.processInfo.environment["TRACKER_FIXTURES"] {
            return URL(fileURLWithPath: override)
        }
        return Repository.root.appendingPathComponent("Fixtures")
    }

    public static func url(_ name: String) -> URL { directory.appendingPathComponent(name) }

    public static func lines(_ name: String) throws -> [String] {
        let text = try String(contentsOf: url(name), encoding: .utf8)
        return text.split(separator: "\n").map(String.init).filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
    }

    public static func fixes(_ name: String) throws -> [DeviceFix] {
        try lines(name).map { try JSONCoding.decoder.decode(DeviceFix.self, from: Data($0.utf8)) }
    }
}
