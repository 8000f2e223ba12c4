import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A private mosquitto on a free loopback port, for tests and benchmarks.
/// Started with `posix_spawn` and an empty signal mask (Foundation.Process
/// leaves the child with signals blocked), stopped with SIGTERM.
public final class TestBroker: @unchecked Sendable {
    public let port: Int32
    /// With accounts, the operator's listener (client ids kept as asked); otherwise `port`.
    public let operatorPort: Int32
    /// With accounts, tracker-http's gate listener (config/mosquitto-logins.conf's 1887); otherwise `port`.
    public let gatePort: Int32
    public let directory: URL
    private var process: ChildProcess
    /// The broker's CPU time so far (user, system seconds).
    public var cpu: (user: Double, system: Double)? { process.cpu }
    private let executable: String
    private let config: URL

    /// `persistent`: the broker saves its sessions and queues to disk every
    /// second and when it stops (as the product's brokers do), so
    /// `restart(graceful: true)` keeps them and a killed one loses a second at most.
    /// Accounts for a broker with access control: name → password.
    /// With accounts the broker runs the product's own `config/mosquitto-logins.conf`.
    public struct Accounts: Sendable {
        public var passwords: [String: String]
        /// The ACL file (the product's `config/acl` unless a test brings its own).
        public var aclFile: String
        /// The accounts that may log in on the operators' listener (by default those named `trackerctl…`).
        public var operators: Set<String>
        /// Where `passwords` and `operators` are when they are made already (by
        /// `trackerctl accounts`); nil: the broker makes them from `passwords`.
        public var passwordDirectory: URL?
        public init(_ passwords: [String: String], aclFile: String, operators: Set<String>? = nil) {
            self.passwords = passwords; self.aclFile = aclFile
            self.operators = operators ?? Set(passwords.keys.filter { $0.hasPrefix("trackerctl") })
        }

        /// The files of an accounts directory as they are: `passwords`, `operators` and `acl`.
        public init(directory: URL) {
            self.init([:], aclFile: directory.appendingPathComponent("acl").path, operators: [])
            passwordDirectory = directory
        }
    }

    /// `passwords` (every account) and `operators` (the operators' listener), made with mosquitto_passwd.
    private static func writePasswords(_ accounts: Accounts, in directory: URL) throws {
        for (file, names) in [("passwords", Set(accounts.passwords.keys)), ("operators", accounts.operators)] {
            let path = directory.appendingPathComponent(file).path
            try "".write(toFile: path, atomically: true, encoding: .utf8)
            for name in names.sorted() {
                let tool = try ChildProcess(executable: "/usr/bin/mosquitto_passwd", arguments: ["-b", path, name, accounts.passwords[name]!],
                                            logFile: directory.appendingPathComponent("passwd.log").path)
                guard tool.wait(timeout: 10) == 0 else { throw TestSupportError("mosquitto_passwd failed for \(name)") }
            }
        }
    }

    /// The product brokers' `message_size_limit` (compose/mosquitto.conf,
    /// config/mosquitto-logins.conf): above the services' 1 MiB replies.
    public static let productMessageSizeLimit = 2_097_152

    /// With a web directory, the map page's listener (MQTT over WebSockets, serving the directory); otherwise nil.
    public let webPort: Int32?

    /// One of the product's broker configurations, read from the repository,
    /// with each `(from, to)` replaced; a `from` the file no longer has is an error.
    static func productConfig(_ path: String, replacing replacements: [(from: String, to: String)]) throws -> String {
        var config = try String(contentsOf: Repository.root.appendingPathComponent(path), encoding: .utf8)
        for (from, to) in replacements {
            guard config.contains(from) else { throw TestSupportError("\(path) has no '\(from)' any more") }
            config = config.replacingOccurrences(of: from, with: to)
        }
        return config
    }

    public init(persistent: Bool = false, accounts: Accounts? = nil, messageSizeLimit: Int? = nil, webDirectory: String? = nil) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-broker-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var lastError: (any Error)?
        if let accounts, accounts.passwordDirectory == nil { try Self.writePasswords(accounts, in: directory) }
        for _ in 0..<5 {
            let port = try freeListenerPort()
            let config = directory.appendingPathComponent("mosquitto.conf")
            var operatorPort: Int32?
            var webPort: Int32?
            var gatePort: Int32?
            let common = """
                persistence_location \(directory.path)/
                # Started as root, mosquitto would switch to its own user, which cannot write here.
                user \(NSUserName())
                log_dest stderr
                log_type error
                log_type warning
                """
            if let accounts {
                // The product's own broker configuration, on free ports and this directory's files.
                operatorPort = try freeListenerPort()
                webPort = try freeListenerPort()
                gatePort = try freeListenerPort()
                var product = try Self.productConfig("config/mosquitto-logins.conf", replacing: [
                    ("listener 1883 127.0.0.1", "listener \(port) 127.0.0.1"),
                    ("listener 1885 127.0.0.1", "listener \(operatorPort!) 127.0.0.1"),
                    ("listener 1886 127.0.0.1", "listener \(webPort!) 127.0.0.1"),
                    ("listener 1887 127.0.0.1", "listener \(gatePort!) 127.0.0.1"),
                    ("http_dir /usr/share/tracker/web", "http_dir \(webDirectory ?? Repository.root.appendingPathComponent("web").path)"),
                    ("password_file /etc/tracker/passwords", "password_file \((accounts.passwordDirectory ?? directory).path)/passwords"),
                    ("password_file /etc/tracker/operators", "password_file \((accounts.passwordDirectory ?? directory).path)/operators"),
                    ("acl_file /etc/tracker/acl", "acl_file \(accounts.aclFile)"),
                    ("persistence true", "persistence \(persistent)"),
                ])
                if let messageSizeLimit { product = product.replacingOccurrences(of: "message_size_limit 2097152", with: "message_size_limit \(messageSizeLimit)") }
                try (product + "\n" + common + "\n").write(to: config, atomically: true, encoding: .utf8)
                if webDirectory == nil { webPort = nil }
            } else {
                // The product's own config/mosquitto.conf, on a free port and this
                // directory: a persistent broker saves every second as there (with
                // 10,000 devices' retained live frames that costs the constellation
                // about 8 % of its throughput).
                var product = try Self.productConfig("config/mosquitto.conf", replacing: [
                    ("listener 1883 127.0.0.1", "listener \(port) 127.0.0.1"),
                    ("persistence true", "persistence \(persistent)"),
                ])
                if let webDirectory {
                    webPort = try freeListenerPort()
                    product += "\nlistener \(webPort!) 127.0.0.1\nprotocol websockets\nhttp_dir \(webDirectory)"
                }
                if let messageSizeLimit { product += "\nmessage_size_limit \(messageSizeLimit)" }
                try (product + "\n" + common + "\n").write(to: config, atomically: true, encoding: .utf8)
            }
            let executable = ["/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto", "/usr/bin/mosquitto"]
                .first { FileManager.default.isExecutableFile(atPath: $0) } ?? "mosquitto"
            let child = try ChildProcess(executable: executable, arguments: ["-c", config.path],
                                         logFile: directory.appendingPathComponent("mosquitto.log").path)
            // Every listener answers, and it is this mosquitto that holds it: one
            // that could not bind a port (another suite drew it too) exits a moment
            // later, and the port answers for whoever else listens there.
            let ports = [port] + [operatorPort, webPort, gatePort].compactMap { $0 }
            if ports.allSatisfy({ waitForPort($0, timeout: 5) }), child.listens(on: ports),
               child.wait(timeout: 0) == nil {
                self.port = port
                self.webPort = webPort
                self.operatorPort = operatorPort ?? port
                self.gatePort = gatePort ?? port
                self.process = child
                self.executable = executable
                self.config = config
                return
            }
            child.kill(SIGKILL)
            lastError = TestSupportError("mosquitto did not start listening on port \(port)")
        }
        throw lastError ?? TestSupportError("mosquitto did not start")
    }

    /// Stops the broker (SIGKILL, or SIGTERM when `graceful`, which lets a
    /// persistent broker save its state; clients see the connection drop
    /// either way) and starts it again on the same port.
    /// What the broker logged (errors and warnings).
    public var log: String { process.log }

    /// SIGHUP: mosquitto rereads its password files and ACL, and applies
    /// them to the connections it has (a login gone is disconnected).
    public func reload() {
        process.kill(SIGHUP)
    }

    public func restart(graceful: Bool = false) throws {
        stop(graceful: graceful)
        try start()
    }

    /// Stops the broker; `start` brings it back on the same port.
    public func stop(graceful: Bool = false) {
        process.kill(graceful ? SIGTERM : SIGKILL)
        _ = process.wait(timeout: 5)
    }

    public func start() throws {
        process = try ChildProcess(executable: executable, arguments: ["-c", config.path],
                                   logFile: directory.appendingPathComponent("mosquitto.log").path)
        guard waitForPort(port, timeout: 5), process.listens(on: [port]) else {
            throw TestSupportError("mosquitto did not come back on port \(port)")
        }
    }

    deinit {
        process.kill(SIGTERM)
        _ = process.wait(timeout: 5)
        try? FileManager.default.removeItem(at: directory)
    }
}

public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A free TCP port on loopback (bind to port 0, read it, close): a port
/// nothing listens on, to be refused. A listener of the test's own takes
/// `freeListenerPort()`.
public func freePort() throws -> Int32 {
    guard let port = bindableLoopbackPort(0) else { throw TestSupportError("bind() failed") }
    return port
}

/// A base port whose every `offset` is free on loopback, for a script that
/// derives its listeners from one port (`scripts/demo`: +1, +2, +3, +4171,
/// +7000). The block is drawn below the kernel's ephemeral range, where
/// `freePort()` and every client's outgoing socket live, so a suite running
/// beside it cannot take one of its ports between this check and the bind.
public func freePortBlock(offsets: [Int32], below ceiling: Int32 = 32_768) throws -> Int32 {
    let span = offsets.max() ?? 0
    let bases = Int32(10_000)..<(ceiling - span)
    for _ in 0..<200 {
        let base = Int32.random(in: bases)
        if offsets.allSatisfy({ bindableLoopbackPort(base + $0) != nil }) { return base }
    }
    throw TestSupportError("no block of free ports with offsets \(offsets) below \(ceiling)")
}

/// A free port for a listener of a test's own (a broker, an HTTP server),
/// drawn below the kernel's ephemeral range like `freePortBlock`: a port
/// `freePort()` gives is one the kernel may hand to the next client's
/// outgoing socket, or to another suite's `freePort()`, before the listener
/// binds it.
public func freeListenerPort() throws -> Int32 {
    try freePortBlock(offsets: [0])
}

/// A TCP socket on 127.0.0.1, closed with this object: binding, listening
/// and connecting, each on one port.
public final class LoopbackSocket {
    private let fd: Int32

    public init?() {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
    }

    deinit { close(fd) }

    /// Binds to `port` (0: any); the port it got.
    public func bind(_ port: Int32) -> Int32? {
        var address = Self.address(port)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        return bound ? Int32(UInt16(bigEndian: address.sin_port)) : nil
    }

    /// Binds to `port` and listens there.
    public func listen(on port: Int32) -> Bool {
        bind(port) != nil && Glibc.listen(fd, 1) == 0
    }

    /// Connects to `port`.
    public func connect(_ port: Int32) -> Bool {
        var address = Self.address(port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// Sends `text`; whether all of it went.
    public func send(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return Glibc.send(fd, bytes, bytes.count, 0) == bytes.count
    }

    /// Reads what comes within `timeout` seconds: the bytes read, 0 when the
    /// peer closed, -1 when nothing came (or on an error).
    public func receive(timeout: Int) -> Int {
        var limit = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 512)
        return recv(fd, &buffer, buffer.count, 0)
    }

    private static func address(_ port: Int32) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return address
    }
}

/// Binds a loopback socket to `port` (0: any), returns the port it got, and closes it.
private func bindableLoopbackPort(_ port: Int32) -> Int32? {
    LoopbackSocket()?.bind(port)
}

/// Polls a TCP connect until it succeeds or the timeout passes.
public func waitForPort(_ port: Int32, timeout: Double) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if LoopbackSocket()?.connect(port) == true { return true }
        usleep(20_000)
    }
    return false
}
