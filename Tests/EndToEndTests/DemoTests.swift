import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

extension HeavySuites {
    /// `scripts/demo` as a new user runs it from a script or CI (no terminal):
    /// once it has ended — by itself or by SIGTERM — none of the processes it
    /// started is left. Every process of a run carries the run's marker in its
    /// environment, so the check finds them however they were started.
    @Suite(.serialized) struct DemoTests {
        @Test func theDemoLeavesNoProcessBehindWhenItEnds() throws {
            let (demo, marker) = try Self.start()
            #expect(demo.wait(timeout: 300) == 0, "the demo failed: \(demo.log.suffix(2_000))")
            #expect(demo.log.contains("accepted points stored by the track service"), "\(demo.log.suffix(2_000))")
            let left = Self.processes(marked: marker)
            #expect(left.isEmpty, "left running: \(left)")
        }

        @Test func theDemoLeavesNoProcessBehindWhenItIsStopped() throws {
            let (demo, marker) = try Self.start()
            // Stopped while the story is told: once the event stream is running.
            let deadline = Date().addingTimeInterval(300)
            while !demo.log.contains("demo: fences"), Date() < deadline, demo.wait(timeout: 0.2) == nil {}
            #expect(demo.log.contains("demo: fences"), "\(demo.log.suffix(2_000))")
            #expect(!Self.processes(marked: marker).isEmpty, "the check would see the demo's processes")
            demo.kill(SIGTERM)
            #expect(demo.wait(timeout: 60) != nil, "the demo did not end on SIGTERM")
            let left = Self.processes(marked: marker)
            #expect(left.isEmpty, "left running: \(left)")
        }

        static func start() throws -> (ChildProcess, String) {
            let marker = "tracker-demo-test-\(UUID().uuidString.prefix(8))"
            var environment = ProcessInfo.processInfo.environment
            environment["TRACKER_BIN_DIR"] = ServiceHarness.binaryDirectory.path
            // The demo derives its other listeners from this port (see scripts/demo).
            environment["TRACKER_MQTT_PORT"] = "\(try freePortBlock(offsets: [0, 1, 2, 3, 4_171, 7_000]))"
            environment["TRACKER_DEMO_TEST"] = marker
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("\(marker).log").path
            let demo = try ChildProcess(executable: "/bin/bash", arguments: [Repository.root.appendingPathComponent("scripts/demo").path],
                                        environment: environment, logFile: log)
            return (demo, marker)
        }

        /// Live processes (not zombies) whose environment holds the marker, as "pid command".
        static func processes(marked marker: String) -> [String] {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            return entries.compactMap { pid -> String? in
                guard Int32(pid) != nil, Int32(pid) != getpid(),
                      let environ = FileManager.default.contents(atPath: "/proc/\(pid)/environ"),
                      environ.range(of: Data("TRACKER_DEMO_TEST=\(marker)".utf8)) != nil else { return nil }
                let status = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
                if status.split(separator: ")").last?.split(separator: " ").first == "Z" { return nil }
                let command = (try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8))?.replacingOccurrences(of: "\0", with: " ") ?? "?"
                return "\(pid) \(command.prefix(160))"
            }
        }
    }
}
