import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One HTTP exchange, waited for on the caller's thread and held to its
/// timeout as a whole: URLSession's own timer on Linux is an idle one, which
/// a server answering slowly never trips (measured: a 3 s stall passed a
/// 0.5 s timeout). For worker threads, never the network thread.
public enum HTTPClient {
    public struct Response: Sendable {
        public var statusCode: Int?
        public var headers: [String: String]
        public var body: Data
        /// Why no server answered (timed out, connection refused, …).
        public var failure: String?
    }

    public static func send(method: String, url: String, headers: [String: String] = [:], body: [UInt8]? = nil,
                            timeoutMs: Int) -> Response {
        guard let target = URL(string: url) else { return Response(statusCode: nil, headers: [:], body: Data(), failure: "bad URL") }
        var request = URLRequest(url: target, timeoutInterval: Double(timeoutMs) / 1000)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body { request.httpBody = Data(body) }
        let done = DispatchSemaphore(value: 0)
        let box = Box()
        let task = URLSession.shared.dataTask(with: request) { data, response, error in
            if let http = response as? HTTPURLResponse {
                var fields: [String: String] = [:]
                for case let (name as String, value as String) in http.allHeaderFields { fields[name.lowercased()] = value }
                box.response = Response(statusCode: http.statusCode, headers: fields, body: data ?? Data(), failure: nil)
            } else {
                box.response = Response(statusCode: nil, headers: [:], body: Data(), failure: error.map(describe) ?? "no answer")
            }
            done.signal()
        }
        task.resume()
        if done.wait(timeout: .now() + .milliseconds(timeoutMs)) == .timedOut {
            task.cancel()
            return Response(statusCode: nil, headers: [:], body: Data(), failure: "timed out")
        }
        return box.response ?? Response(statusCode: nil, headers: [:], body: Data(), failure: "no answer")
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

    private final class Box: @unchecked Sendable { var response: Response? }
}
