import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `scripts/http-sink.py` as a child process: the customer's backend in
/// tests and benchmarks. It answers as scripted (`answers`: status codes,
/// `429:7` for a Retry-After, `slow:3` to stall) and then 200, and keeps
/// every request it receives as one JSON line in `file`.
public final class HTTPSink: @unchecked Sendable {
    public let port: Int32
    public let file: URL
    private let process: ChildProcess

    /// Starts the sink in `directory` and waits until it listens: its own
    /// process, so that a listener of another suite's that took the port
    /// first (between the check and the bind) is not taken for the sink.
    public init(in directory: URL, answers: [String] = []) throws {
        file = directory.appendingPathComponent("sink-\(UUID().uuidString.prefix(6)).jsonl")
        var failures: [String] = []
        for _ in 0..<3 {
            let port = try freeListenerPort()
            let process = try ChildProcess(executable: "/usr/bin/python3",
                                           arguments: [Repository.root.appendingPathComponent("scripts/http-sink.py").path, "\(port)", file.path] + answers,
                                           logFile: file.path + ".log")
            if waitForPort(port, timeout: 10), process.listens(on: [port]) {
                self.port = port
                self.process = process
                return
            }
            process.kill(SIGKILL)
            _ = process.wait(timeout: 5)
            failures.append("port \(port): \(process.log)")
        }
        throw TestSupportError("the HTTP sink did not start listening: \(failures.joined(separator: "; "))")
    }

    public var url: String { "http://127.0.0.1:\(port)" }
    /// What the sink printed (a traceback if it stopped), for a failing test to show.
    public var log: String { process.log }
    /// The sink's own CPU time so far (seconds), for a bench to count.
    public var cpu: (user: Double, system: Double)? { process.cpu }

    /// The requests received, one line each.
    public var lines: [Substring] { ((try? String(contentsOf: file, encoding: .utf8)) ?? "").split(separator: "\n") }

    /// Every (device, seq) received in JSON batches, as "device:seq", with how many times.
    public func points() -> [String: Int] {
        var seen: [String: Int] = [:]
        for line in lines {
            guard let body = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let points = body["points"] as? [[String: Any]] else { continue }
            for p in points {
                if let device = p["device"] as? String, let seq = p["seq"] as? Int { seen["\(device):\(seq)", default: 0] += 1 }
            }
        }
        return seen
    }

    public func stop() {
        process.kill(SIGTERM)
        _ = process.wait(timeout: 5)
    }

    deinit { process.kill(SIGKILL); _ = process.wait(timeout: 5) }
}
