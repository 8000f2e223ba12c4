import Foundation
import TestSupport
import Testing

/// A test's broker is taken only when its own mosquitto holds every port it
/// was given: a port that another suite drew too answers a connect for that
/// suite's listener, while the mosquitto that could not bind it exits a
/// moment later (a suite's client was refused that way once).
@Suite struct ListenerOwnershipTests {
    @Test func aPortIsHeldByTheProcessThatListensOnIt() throws {
        let port = try freeListenerPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("listener-\(UUID().uuidString.prefix(8)).log").path
        let server = try ChildProcess(executable: "python3", arguments: ["-m", "http.server", "\(port)", "--bind", "127.0.0.1"], logFile: log)
        defer { server.kill(SIGKILL); _ = server.wait(timeout: 5); try? FileManager.default.removeItem(atPath: log) }
        #expect(waitForPort(port, timeout: 10))
        #expect(server.listens(on: [port]))

        // A port this test listens on: it answers, but not for the server.
        let other = try freeListenerPort()
        let listener = try #require(LoopbackSocket())
        #expect(listener.listen(on: other))
        #expect(waitForPort(other, timeout: 1))
        #expect(!server.listens(on: [other]))
    }
}
