import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn` (empty signal mask, default
/// dispositions), its output sent to a log file, reaped with `waitpid`.
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    public let logFile: String
    private let lock = NSLock()
    private var status: Int32?

    public init(executable: String, arguments: [String], environment: [String: String]? = nil,
                logFile: String) throws {
        self.logFile = logFile
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, logFile, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { env.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, executable, &actions, &attributes, argv, env)
        guard rc == 0 else { throw TestSupportError("posix_spawn \(executable) failed: \(String(cString: strerror(rc)))") }
        self.pid = pid
    }

    /// Whether this process holds a socket listening on each TCP port of
    /// `ports` (Linux: a listener of `/proc/net/tcp` or `tcp6`, found among
    /// the process's open files). A port another process listens on answers
    /// a connect too.
    public func listens(on ports: [Int32]) -> Bool {
        let suffixes = Dictionary(ports.map { (String(format: ":%04X", $0), $0) }, uniquingKeysWith: { first, _ in first })
        // Columns: sl, local_address, rem_address, st (0A: listening), …, inode (the tenth).
        var listeners: [String: Int32] = [:]  // socket inode → port
        for path in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let table = try? String(contentsOfFile: path, encoding: .utf8) else { continue }
            for line in table.split(separator: "\n").dropFirst() {
                let columns = line.split(separator: " ", omittingEmptySubsequences: true)
                guard columns.count > 9, columns[3] == "0A", let port = suffixes[String(columns[1].suffix(5))] else { continue }
                listeners[String(columns[9])] = port
            }
        }
        guard let files = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return false }
        let held = Set(files.compactMap { file -> Int32? in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(file)"),
                  target.hasPrefix("socket:[") else { return nil }
            return listeners[String(target.dropFirst("socket:[".count).dropLast())]
        })
        return Set(ports).isSubset(of: held)
    }

    public func kill(_ signal: Int32) {
        lock.withLock { if status == nil { _ = Glibc.kill(pid, signal) } }
    }

    /// Polls `waitpid` until the child exits; returns its exit code
    /// (128 + signal for a signal), or nil on timeout.
    public func wait(timeout: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            if let code = lock.withLock({ status }) { return code }
            var raw: Int32 = 0
            let result = waitpid(pid, &raw, WNOHANG)
            if result == pid {
                let code = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
                lock.withLock { status = code }
                return code
            }
            if result < 0 { return lock.withLock { status } ?? -1 }
            usleep(5_000)
        } while Date() < deadline
        return nil
    }

    public var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    /// Resident memory now, in bytes (VmRSS), its peak so far (VmHWM), and
    /// the part that is the process's own (RssAnon; the rest is mapped files,
    /// mostly shared libraries every service shares).
    public var memory: (resident: Int, peak: Int, own: Int)? { Self.memory(of: pid) }

    /// The same for any process (`getpid()`: this one).
    public static func memory(of pid: pid_t) -> (resident: Int, peak: Int, own: Int)? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        func kB(_ key: String) -> Int? {
            status.split(separator: "\n").first { $0.hasPrefix(key) }
                .flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") }
        }
        guard let rss = kB("VmRSS:"), let hwm = kB("VmHWM:"), let anon = kB("RssAnon:") else { return nil }
        return (rss * 1024, hwm * 1024, anon * 1024)
    }

    /// CPU time the process has used so far, in seconds: user and system
    /// (from /proc/PID/stat).
    public var cpu: (user: Double, system: Double)? { Self.cpu(of: pid) }

    public static func cpu(of pid: pid_t) -> (user: Double, system: Double)? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // After the command's closing parenthesis: state is field 0, utime 11, stime 12.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return (user / ticks, system / ticks)
    }

    deinit {
        if lock.withLock({ status }) == nil {
            Glibc.kill(pid, SIGKILL)
            _ = wait(timeout: 2)
        }
    }
}
