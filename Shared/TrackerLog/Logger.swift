import FoundationEssentials
import Glibc

public enum LogLevel: String, Sendable, CaseIterable, Comparable {
    case debug, info, warning, error
    /// Above every level: as a minimum, nothing is logged.
    case off
    var rank: Int { Self.allCases.firstIndex(of: self)! }
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rank < b.rank }
}

/// Structured JSON-lines logging to stderr: constant messages, data in
/// metadata. A value, passed to whoever logs.
public struct Logger: Sendable {
    public var label: String
    public var minimum: LogLevel

    public init(label: String, minimum: LogLevel = .info) { self.label = label; self.minimum = minimum }

    public func debug(_ message: String, _ metadata: [String: String] = [:]) { log(.debug, message, metadata) }
    public func info(_ message: String, _ metadata: [String: String] = [:]) { log(.info, message, metadata) }
    public func warning(_ message: String, _ metadata: [String: String] = [:]) { log(.warning, message, metadata) }
    public func error(_ message: String, _ metadata: [String: String] = [:]) { log(.error, message, metadata) }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    public func log(_ level: LogLevel, _ message: String, _ metadata: [String: String]) {
        guard level >= minimum else { return }
        var line: [String: String] = metadata
        line["level"] = level.rawValue
        line["logger"] = label
        line["msg"] = message
        line["timeMs"] = String(Int64(Date().timeIntervalSince1970 * 1000))
        // A log line must never throw into its caller; one that cannot be encoded still leaves a trace.
        var data = (try? Self.encoder.encode(line)) ?? Data(#"{"msg":"unencodable log line"}"#.utf8)
        data.append(0x0A)
        StandardError.write(data)
    }
}

/// Standard error, written whole: a short write goes on, an interrupted one
/// is retried. (FileHandle is libFoundation's, which the services do without.)
public enum StandardError {
    public static func write(_ text: String) { write(Data(text.utf8)) }

    public static func write(_ data: Data) {
        data.withUnsafeBytes { buffer in
            guard var next = buffer.baseAddress else { return }
            var left = buffer.count
            while left > 0 {
                let written = Glibc.write(STDERR_FILENO, next, left)
                if written > 0 { next += written; left -= written } else if written < 0 && errno == EINTR { continue } else { return }
            }
        }
    }
}
