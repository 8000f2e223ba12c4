import FoundationEssentials
import OutboundHTTP
import Runtime
import UploaderCore

/// Makes one HTTP exchange; tests give the worker their own.
protocol HTTPTransport: Sendable {
    func send(_ request: UploadRequest, timeoutMs: Int) async -> Exchange
}

/// The real one, held to the timeout as a whole (see `HTTPClient`).
struct CurlTransport: HTTPTransport {
    func send(_ request: UploadRequest, timeoutMs: Int) async -> Exchange {
        let response = await HTTPClient.exchange(method: request.method, url: request.url, headers: request.headers, body: request.body, timeoutMs: timeoutMs)
        return Exchange(statusCode: response.statusCode, retryAfter: response.headers["retry-after"], failure: response.failure)
    }
}
