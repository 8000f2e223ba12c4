import CCurl
import Dispatch
import FoundationEssentials
import Model
import Synchronization

/// One HTTP exchange over libcurl, held to its timeout as a whole
/// (`CURLOPT_TIMEOUT_MS` covers connecting, sending and the whole answer,
/// so a server answering slowly trips it too). Blocking: never on the
/// network thread. libcurl itself rather than URLSession, so that a
/// service calling out loads neither libFoundation nor FoundationNetworking.
public enum HTTPClient {
    public struct Response: Sendable {
        public var statusCode: Int?
        public var headers: [String: String]
        public var body: Data
        /// Why no server answered (timed out, connection refused, …).
        public var failure: String?

        static func failed(_ reason: String) -> Response { Response(statusCode: nil, headers: [:], body: Data(), failure: reason) }
    }

    /// An answer larger than this is cut off and counts as a failure: a
    /// road match or an endpoint's reply is far smaller.
    static let maxBodyBytes = 64 << 20

    /// The exchange, awaited: the uploader's worker. The transfer blocks a
    /// dispatch thread, not one of the task pool's; cancelling the task ends it.
    public static func exchange(method: String, url: String, headers: [String: String] = [:], body: [UInt8]? = nil,
                                timeoutMs: Int) async -> Response {
        let cancellation = Cancellation()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Response, Never>) in
                DispatchQueue.global().async {
                    continuation.resume(returning: perform(method: method, url: url, headers: headers, body: body,
                                                           timeoutMs: timeoutMs, cancellation: cancellation))
                }
            }
        } onCancel: {
            cancellation.cancel()
        }
    }

    /// The exchange, waited for on the caller's thread: the track's road
    /// snapping, inside a query that cannot await.
    public static func send(method: String, url: String, headers: [String: String] = [:], body: [UInt8]? = nil,
                            timeoutMs: Int) -> Response {
        perform(method: method, url: url, headers: headers, body: body, timeoutMs: timeoutMs, cancellation: Cancellation())
    }

    /// Set once a task's exchange is no longer wanted; libcurl asks as it goes.
    final class Cancellation: Sendable {
        private let cancelled = Atomic(false)
        func cancel() { cancelled.store(true, ordering: .relaxed) }
        var isCancelled: Bool { cancelled.load(ordering: .relaxed) }
    }

    /// libcurl's global state, set up before the first handle (thread-safe in libcurl ≥ 7.84).
    private static let global: Void = { _ = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    /// Idle handles, each with its open connections, resolved names and TLS
    /// sessions: the next exchange with the same server reuses them
    /// (keep-alive), as URLSession's one session did.
    private static let idleHandles = Mutex<[IdleHandle]>([])
    private static let maxIdleHandles = 8

    /// A handle among the idle: owned by the list until taken, then by one exchange.
    private struct IdleHandle: @unchecked Sendable { let curl: UnsafeMutableRawPointer }

    private static func takeHandle() -> UnsafeMutableRawPointer? {
        _ = global
        return idleHandles.withLock { $0.popLast() }?.curl ?? curl_easy_init()
    }

    /// Back among the idle, its options cleared (its caches kept), or closed past the limit.
    private static func putBack(_ curl: UnsafeMutableRawPointer) {
        curl_easy_reset(curl)
        let kept = idleHandles.withLock { idle in
            guard idle.count < maxIdleHandles else { return false }
            idle.append(IdleHandle(curl: curl))
            return true
        }
        if !kept { curl_easy_cleanup(curl) }
    }

    static func perform(method: String, url: String, headers: [String: String], body: [UInt8]?, timeoutMs: Int,
                        cancellation: Cancellation) -> Response {
        // Declared first, so that they outlive the transfer whatever returns.
        let answer = CurlAnswer(cancellation)
        let context = Unmanaged.passRetained(answer)
        defer { context.release() }
        var fields: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(fields) }
        guard let curl = takeHandle() else { return .failed("no answer") }
        defer { putBack(curl) }

        for (name, value) in headers {
            // "Name;" is libcurl's way to send a header with an empty value ("Name:" would remove it).
            fields = curl_slist_append(fields, value.isEmpty ? "\(name);" : "\(name): \(value)")
        }
        // libcurl would wait for a 100 Continue before a large body; a plain request is what servers expect.
        fields = curl_slist_append(fields, "Expect:")
        if !headers.keys.contains(where: { $0.lowercased() == "user-agent" }) {
            fields = curl_slist_append(fields, "User-Agent: Tracker")
        }
        // Only http and https, and none at all with a libcurl too old to say so.
        guard tracker_curl_set_pointer(curl, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK,
              tracker_curl_set_pointer(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") == CURLE_OK else {
            return .failed("libcurl 7.85 or later is needed")
        }
        tracker_curl_set_pointer(curl, CURLOPT_URL, url)
        switch (method, body) {
        case ("GET", nil): break
        case ("HEAD", nil): tracker_curl_set_long(curl, CURLOPT_NOBODY, 1)
        default:
            // Any other method sends its body, an empty one included: a POST
            // without one still says Content-Length: 0. COPYPOSTFIELDS copies
            // the bytes, so they need not outlive this call.
            let bytes = body ?? []
            tracker_curl_set_offset(curl, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bytes.count))
            bytes.withUnsafeBytes { _ = tracker_curl_set_pointer(curl, CURLOPT_COPYPOSTFIELDS, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)) }
            if method != "POST" { tracker_curl_set_pointer(curl, CURLOPT_CUSTOMREQUEST, method) }
        }
        tracker_curl_set_pointer(curl, CURLOPT_HTTPHEADER, fields)
        // Redirects followed, as URLSession did, to http and https only.
        tracker_curl_set_long(curl, CURLOPT_FOLLOWLOCATION, 1)
        tracker_curl_set_long(curl, CURLOPT_MAXREDIRS, 5)
        // Whatever encodings libcurl can decode, decoded.
        tracker_curl_set_pointer(curl, CURLOPT_ACCEPT_ENCODING, "")
        tracker_curl_set_long(curl, CURLOPT_TIMEOUT_MS, max(1, timeoutMs))
        // No signals: a timeout during name resolution must not raise SIGALRM in a threaded process.
        tracker_curl_set_long(curl, CURLOPT_NOSIGNAL, 1)
        tracker_curl_set_data_callback(curl, CURLOPT_WRITEFUNCTION, receiveBody)
        tracker_curl_set_pointer(curl, CURLOPT_WRITEDATA, context.toOpaque())
        tracker_curl_set_data_callback(curl, CURLOPT_HEADERFUNCTION, receiveHeader)
        tracker_curl_set_pointer(curl, CURLOPT_HEADERDATA, context.toOpaque())
        tracker_curl_set_long(curl, CURLOPT_NOPROGRESS, 0)
        tracker_curl_set_progress_callback(curl, checkCancelled)
        tracker_curl_set_pointer(curl, CURLOPT_XFERINFODATA, context.toOpaque())

        // Cancelled before it began: nothing is sent.
        guard !cancellation.isCancelled else { return .failed("cancelled") }
        let code = curl_easy_perform(curl)
        guard code == CURLE_OK else {
            return .failed(answer.tooLarge ? "answer larger than \(maxBodyBytes >> 20) MB" : describe(code))
        }
        var status = 0
        tracker_curl_response_code(curl, &status)
        return Response(statusCode: status, headers: answer.headers, body: answer.body, failure: nil)
    }

    /// A failure as the services name it; the rarer ones in libcurl's words.
    static func describe(_ code: CURLcode) -> String {
        switch code {
        case CURLE_OPERATION_TIMEDOUT: "timed out"
        case CURLE_COULDNT_CONNECT: "connection refused"
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: "host not found"
        case CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_PARTIAL_FILE: "connection lost"
        case CURLE_ABORTED_BY_CALLBACK: "cancelled"
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL: "bad URL"
        default: "network error: \(String(cString: curl_easy_strerror(code)))"
        }
    }
}

/// What libcurl hands over during one exchange, through its callbacks.
private final class CurlAnswer {
    var body = Data()
    var headers: [String: String] = [:]
    var tooLarge = false
    let cancellation: HTTPClient.Cancellation

    init(_ cancellation: HTTPClient.Cancellation) { self.cancellation = cancellation }

    static func from(_ context: UnsafeMutableRawPointer?) -> CurlAnswer {
        Unmanaged<CurlAnswer>.fromOpaque(context!).takeUnretainedValue()
    }

    /// The bytes taken, or 0 to stop libcurl (a write error) past the cap.
    func appendBody(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard body.count + count <= HTTPClient.maxBodyBytes else { tooLarge = true; return 0 }
        if let data, count > 0 { body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: count) }
        return count
    }

    /// One header line. A status line starts a new set: only the last
    /// answer's fields count, after a redirect or an interim 1xx.
    func appendHeader(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let data, count > 0 else { return count }
        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self)
        if line.hasPrefix("HTTP/") {
            headers = [:]
        } else if let colon = line.firstIndex(of: ":") {
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingWhitespace()
        }
        return count
    }
}

private let receiveBody: tracker_curl_data_callback = { data, size, count, context in
    CurlAnswer.from(context).appendBody(data, size * count)
}

private let receiveHeader: tracker_curl_data_callback = { data, size, count, context in
    CurlAnswer.from(context).appendHeader(data, size * count)
}

private let checkCancelled: tracker_curl_progress_callback = { context, _, _, _, _ in
    CurlAnswer.from(context).cancellation.isCancelled ? 1 : 0
}
