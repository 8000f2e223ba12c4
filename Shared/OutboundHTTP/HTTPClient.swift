import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One HTTP exchange, held to its timeout as a whole: URLSession's own timer
/// on Linux is an idle one, which a server answering slowly never trips
/// (measured: a 3 s stall passed a 0.5 s timeout). Never on the network thread.
public enum HTTPClient {
    public struct Response: Sendable {
        public var statusCode: Int?
        public var headers: [String: String]
        public var body: Data
        /// Why no server answered (timed out, connection refused, …).
        public var failure: String?

        static let badURL = Response(statusCode: nil, headers: [:], body: Data(), failure: "bad URL")
        static let noAnswer = Response(statusCode: nil, headers: [:], body: Data(), failure: "no answer")

        init(statusCode: Int?, headers: [String: String], body: Data, failure: String?) {
            self.statusCode = statusCode; self.headers = headers; self.body = body; self.failure = failure
        }

        init(_ data: Data?, _ response: URLResponse?, _ error: (any Error)?) {
            guard let http = response as? HTTPURLResponse else {
                self.init(statusCode: nil, headers: [:], body: Data(), failure: error.map(HTTPClient.describe) ?? "no answer")
                return
            }
            var fields: [String: String] = [:]
            for case let (name as String, value as String) in http.allHeaderFields { fields[name.lowercased()] = value }
            self.init(statusCode: http.statusCode, headers: fields, body: data ?? Data(), failure: nil)
        }
    }

    /// A session of our own rather than `URLSession.shared`: no response
    /// cache and no cookies. An upload or a road query is never answered
    /// from a cache, and an endpoint's cookies must not ride along with the
    /// next request; the shared session still looked both up for every
    /// request (a fifth of URLSession's time in the uploader).
    private static let session: URLSession = {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        configuration.urlCredentialStorage = nil
        return URLSession(configuration: configuration)
    }()

    /// The exchange, awaited: the uploader's worker.
    public static func exchange(method: String, url: String, headers: [String: String] = [:], body: [UInt8]? = nil,
                                timeoutMs: Int) async -> Response {
        guard let request = request(method: method, url: url, headers: headers, body: body, timeoutMs: timeoutMs) else { return .badURL }
        let call = Call()
        return await withTaskGroup(of: Response.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<Response, Never>) in
                        let task = session.dataTask(with: request) { data, response, error in
                            continuation.resume(returning: Response(data, response, error))
                        }
                        call.start(task)
                    }
                } onCancel: {
                    // The completion handler then runs with "cancelled", which resumes the continuation.
                    call.cancel()
                }
            }
            group.addTask {
                do { try await Task.sleep(for: .milliseconds(timeoutMs)) } catch {}
                return Response(statusCode: nil, headers: [:], body: Data(), failure: "timed out")
            }
            let first = await group.next() ?? .noAnswer
            group.cancelAll()
            return first
        }
    }

    /// The exchange, waited for on the caller's thread: the track's road
    /// snapping, inside a query that cannot await.
    public static func send(method: String, url: String, headers: [String: String] = [:], body: [UInt8]? = nil,
                            timeoutMs: Int) -> Response {
        guard let request = request(method: method, url: url, headers: headers, body: body, timeoutMs: timeoutMs) else { return .badURL }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<Response?>(nil)
        let task = session.dataTask(with: request) { data, response, error in
            result.withLock { $0 = Response(data, response, error) }
            done.signal()
        }
        task.resume()
        if done.wait(timeout: .now() + .milliseconds(timeoutMs)) == .timedOut {
            task.cancel()
            return Response(statusCode: nil, headers: [:], body: Data(), failure: "timed out")
        }
        return result.withLock { $0 } ?? .noAnswer
    }

    private static func request(method: String, url: String, headers: [String: String], body: [UInt8]?, timeoutMs: Int) -> URLRequest? {
        guard let target = URL(string: url) else { return nil }
        var request = URLRequest(url: target, timeoutInterval: Double(timeoutMs) / 1000)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body { request.httpBody = Data(body) }
        return request
    }

    /// The task of an exchange under way, for cancelling it: a cancel that
    /// comes before the task exists cancels it as it starts.
    private final class Call: Sendable {
        private let state = Mutex<(task: URLSessionDataTask?, cancelled: Bool)>((nil, false))

        func start(_ task: URLSessionDataTask) {
            let cancelled = state.withLock { s in s.task = task; return s.cancelled }
            task.resume()
            if cancelled { task.cancel() }
        }

        func cancel() {
            state.withLock { s in s.cancelled = true; return s.task }?.cancel()
        }
    }

    static func describe(_ error: any Error) -> String {
        switch (error as NSError).code {
        case NSURLErrorTimedOut: "timed out"
        case NSURLErrorCannotConnectToHost: "connection refused"
        case NSURLErrorCannotFindHost: "host not found"
        case NSURLErrorNetworkConnectionLost: "connection lost"
        case let code: "network error \(code)"
        }
    }

}
