import CMicroHTTPD
import Dispatch
import Foundation
import HTTPCore
import Runtime
import Synchronization
import TrackerLog

/// libmicrohttpd's daemon as a part of the process: it parses HTTP (we never
/// do), gives each connection a thread of its own, and enforces the limits
/// (connections, per address, idle timeout for slow clients, memory per
/// connection). Each request's body is read up to `maxBodyBytes`, then the
/// handler runs on the Swift pool while the connection's thread waits.
final class MHDServer: LongRunning, @unchecked Sendable {
    typealias Handler = @Sendable (HTTPRequest) async -> HTTPResponse
    /// Tried first, on the connection's thread; nil hands the request to `handler`.
    typealias BlockingHandler = @Sendable (HTTPRequest) -> HTTPResponse?

    struct Limits: Sendable {
        var maxBodyBytes: Int
        var connections: UInt32
        var connectionsPerAddress: UInt32
        /// A connection silent this long is closed (a client that never finishes its request).
        var idleTimeoutSec: UInt32
    }

    let host: String
    let requestedPort: UInt16
    let limits: Limits
    let handler: Handler
    let blocking: BlockingHandler
    let logger: Logger
    private let stopping = StopRequest()
    /// The running daemon (libmicrohttpd's handle, used from the thread that starts and the one that stops it).
    private struct Daemon: @unchecked Sendable { let pointer: OpaquePointer }
    private let daemon = Mutex<Daemon?>(nil)
    /// The open event streams, closed before the daemon stops (their threads wait in them).
    private let streams = Mutex<[ObjectIdentifier: any EventSource]>([:])

    init(host: String, port: UInt16, limits: Limits, logger: Logger, blocking: @escaping BlockingHandler = { _ in nil },
         handler: @escaping Handler) {
        self.host = host; self.requestedPort = port; self.limits = limits; self.logger = logger; self.handler = handler
        self.blocking = blocking
    }

    /// Binds the port (0: one the kernel picks); throws when it cannot.
    func start() throws -> UInt16 {
        let started = tracker_mhd_start(host, requestedPort, Self.access, Unmanaged.passUnretained(self).toOpaque(),
                                        Self.completed, nil, limits.connections, limits.connectionsPerAddress,
                                        limits.idleTimeoutSec, 64 * 1024)
        guard let started else { throw ConfigError("httpPort", "cannot listen on \(host):\(requestedPort) (in use, or not an IPv4 address)") }
        daemon.withLock { $0 = Daemon(pointer: started) }
        return tracker_mhd_port(started)
    }

    func run() async throws {
        if daemon.withLock({ $0 }) == nil { _ = try start() }
        await stopping.wait()
        for stream in streams.withLock({ Array($0.values) }) { stream.close() }
        // Joins the connections' threads: each ends with its request.
        if let running = daemon.withLock({ d -> Daemon? in defer { d = nil }; return d }) { MHD_stop_daemon(running.pointer) }
    }

    func stop() { stopping.request() }

    // MARK: libmicrohttpd's callbacks

    /// What one request has sent so far.
    final class Pending {
        var body: [UInt8] = []
        var tooLarge = false
        var answered = false
    }

    private static let access: MHD_AccessHandlerCallback = { cls, connection, url, method, _, upload, uploadSize, requestState in
        guard let cls, let connection, let requestState, let uploadSize else { return tracker_mhd_no }
        let server = Unmanaged<MHDServer>.fromOpaque(cls).takeUnretainedValue()
        return server.access(connection, url: url.map { String(cString: $0) } ?? "/", method: method.map { String(cString: $0) } ?? "GET",
                             upload: upload, uploadSize: uploadSize, requestState: requestState)
    }

    private static let completed: MHD_RequestCompletedCallback = { _, _, requestState, _ in
        guard let requestState, let pending = requestState.pointee else { return }
        Unmanaged<Pending>.fromOpaque(pending).release()
        requestState.pointee = nil
    }

    private func access(_ connection: OpaquePointer, url: String, method: String, upload: UnsafePointer<CChar>?,
                        uploadSize: UnsafeMutablePointer<Int>, requestState: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        guard let state = requestState.pointee else {
            // The first call: headers only. A declared body over the limit is refused before it is read.
            let pending = Pending()
            requestState.pointee = Unmanaged.passRetained(pending).toOpaque()
            if let length = MHD_lookup_connection_value(connection, tracker_mhd_header_kind, "Content-Length").map({ String(cString: $0) }),
               let bytes = Int(length), bytes > limits.maxBodyBytes {
                // Answered now (libmicrohttpd takes a response only before the body or after it), nothing read.
                pending.answered = true
                return queue(tooLarge.response, on: connection)
            }
            return tracker_mhd_yes
        }
        let pending = Unmanaged<Pending>.fromOpaque(state).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            if !pending.tooLarge, !pending.answered, let upload {
                if pending.body.count + uploadSize.pointee > limits.maxBodyBytes {
                    pending.tooLarge = true
                    pending.body = []
                } else {
                    upload.withMemoryRebound(to: UInt8.self, capacity: uploadSize.pointee) {
                        pending.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: uploadSize.pointee))
                    }
                }
            }
            // A body without a declared length that grows past the limit is read to its end, kept no further.
            uploadSize.pointee = 0
            return tracker_mhd_yes
        }
        if pending.answered { return tracker_mhd_yes }
        pending.answered = true
        if pending.tooLarge { return queue(tooLarge.response, on: connection) }
        let request = HTTPRequest(method: method, path: url, query: Self.values(connection, tracker_mhd_argument_kind, lowercased: false),
                                  headers: Self.values(connection, tracker_mhd_header_kind, lowercased: true), body: pending.body,
                                  clientAddress: Self.clientAddress(connection))
        return queue(wait(for: request), on: connection)
    }

    private var tooLarge: HTTPError { HTTPError(413, .badInput, "body: over \(limits.maxBodyBytes) bytes (maxBodyBytes); nothing of it was taken") }

    /// Runs the handler on the Swift pool; this connection's own thread waits for it.
    private func wait(for request: HTTPRequest) -> HTTPResponse {
        if let response = blocking(request) { return response }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<HTTPResponse?>(nil)
        let handler = self.handler
        Task {
            let response = await handler(request)
            result.withLock { $0 = response }
            done.signal()
        }
        done.wait()
        return result.withLock { $0 } ?? HTTPError(500, .internal, "no response").response
    }

    private func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
        let made: OpaquePointer?
        if let stream = response.stream {
            let box = StreamBox(stream, server: self)
            streams.withLock { $0[ObjectIdentifier(box)] = stream }
            made = MHD_create_response_from_callback(UInt64.max,  // MHD_SIZE_UNKNOWN
                                                      4096, Self.read, Unmanaged.passRetained(box).toOpaque(), Self.free)
        } else {
            made = response.body.withUnsafeBytes { bytes in
                MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), tracker_mhd_must_copy)
            }
        }
        guard let made else { return tracker_mhd_no }
        defer { MHD_destroy_response(made) }
        for (name, value) in response.headers { _ = MHD_add_response_header(made, name, value) }
        return MHD_queue_response(connection, UInt32(response.status), made)
    }

    /// A stream's bytes not yet handed to libmicrohttpd.
    final class StreamBox {
        let source: any EventSource
        weak var server: MHDServer?
        var rest: [UInt8] = []
        init(_ source: any EventSource, server: MHDServer) { self.source = source; self.server = server }
    }

    private static let read: MHD_ContentReaderCallback = { cls, _, buffer, max in
        guard let cls, let buffer else { return MHD_CONTENT_READER_END_WITH_ERROR }
        let box = Unmanaged<StreamBox>.fromOpaque(cls).takeUnretainedValue()
        if box.rest.isEmpty {
            guard let next = box.source.next() else { return MHD_CONTENT_READER_END_OF_STREAM }
            box.rest = next
        }
        let count = Swift.min(max, box.rest.count)
        box.rest.withUnsafeBytes { bytes in UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress!, byteCount: count) }
        box.rest.removeFirst(count)
        return count
    }

    private static let free: MHD_ContentReaderFreeCallback = { cls in
        guard let cls else { return }
        let box = Unmanaged<StreamBox>.fromOpaque(cls).takeRetainedValue()
        box.source.close()
        box.server?.streams.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(box)) }
    }

    // MARK: Reading the request

    private final class Collected { var values: [String: String] = [:]; var lowercased = false }

    private static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind, lowercased: Bool) -> [String: String] {
        let collected = Collected()
        collected.lowercased = lowercased
        _ = MHD_get_connection_values(connection, kind, { cls, _, key, value in
            guard let cls, let key else { return tracker_mhd_yes }
            let collected = Unmanaged<Collected>.fromOpaque(cls).takeUnretainedValue()
            var name = String(cString: key)
            if collected.lowercased { name = name.lowercased() }
            if collected.values[name] == nil { collected.values[name] = value.map { String(cString: $0) } ?? "" }
            return tracker_mhd_yes
        }, Unmanaged.passUnretained(collected).toOpaque())
        return collected.values
    }

    private static func clientAddress(_ connection: OpaquePointer) -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        tracker_mhd_client_address(connection, &buffer, buffer.count)
        return String(cString: buffer)
    }
}
