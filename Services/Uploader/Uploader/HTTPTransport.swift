import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import UploaderCore

/// Makes one HTTP exchange; tests give the worker their own.
protocol HTTPTransport: Sendable {
    func send(_ request: UploadRequest, timeoutMs: Int) -> Exchange
}

/// URLSession, waited for on the worker's own thread.
struct URLSessionTransport: HTTPTransport {
    func send(_ request: UploadRequest, timeoutMs: Int) -> Exchange {
        guard let url = URL(string: request.url) else { return Exchange(failure: "bad URL") }
        var r = URLRequest(url: url, timeoutInterval: Double(timeoutMs) / 1000)
        r.httpMethod = request.method
        for (name, value) in request.headers { r.setValue(value, forHTTPHeaderField: name) }
        if let body = request.body { r.httpBody = Data(body) }
        let done = DispatchSemaphore(value: 0)
        let result = ResultBox()
        let task = URLSession.shared.dataTask(with: r) { _, response, error in
            if let http = response as? HTTPURLResponse {
                result.exchange = Exchange(statusCode: http.statusCode, retryAfter: http.value(forHTTPHeaderField: "Retry-After"))
            } else {
                result.exchange = Exchange(failure: error.map { Self.describe($0) } ?? "no answer")
            }
            done.signal()
        }
        task.resume()
        // The whole exchange within the timeout: URLSession's own on Linux is an idle
        // timer that a server answering slowly never trips (measured: a 3 s stall passed a 0.5 s timeout).
        if done.wait(timeout: .now() + .milliseconds(timeoutMs)) == .timedOut {
            task.cancel()
            return Exchange(failure: "timed out")
        }
        return result.exchange ?? Exchange(failure: "no answer")
    }

    static func describe(_ error: any Error) -> String {
        let code = (error as NSError).code
        switch code {
        case NSURLErrorTimedOut: return "timed out"
        case NSURLErrorCannotConnectToHost: return "connection refused"
        case NSURLErrorCannotFindHost: return "host not found"
        case NSURLErrorNetworkConnectionLost: return "connection lost"
        default: return "network error \(code)"
        }
    }

    private final class ResultBox: @unchecked Sendable { var exchange: Exchange? }
}
