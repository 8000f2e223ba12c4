import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

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
        #expect(server.listens(onLoopbackPort: port))

        // A port this test listens on: it answers, but not for the server.
        let other = try freeListenerPort()
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(other).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        #expect(bound && listen(fd, 1) == 0)
        #expect(waitForPort(other, timeout: 1))
        #expect(!server.listens(onLoopbackPort: other))
    }
}
