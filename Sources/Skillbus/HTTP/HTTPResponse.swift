/// One HTTP/1.1 response as the operator endpoint sends it: every connection closes after its response,
/// except an event stream, which stays open.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]
    /// Extra header fields, such as `Allow` on a 405.
    public var headers: [(String, String)] = []
    /// An event stream: the head goes out without a length, and events follow as they come.
    public var streams = false

    public init(status: Int, contentType: String, body: [UInt8], headers: [(String, String)] = []) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.headers = headers
    }

    public static func == (lhs: HTTPResponse, rhs: HTTPResponse) -> Bool {
        lhs.status == rhs.status && lhs.contentType == rhs.contentType && lhs.body == rhs.body
            && lhs.streams == rhs.streams && lhs.headers.map { [$0.0, $0.1] } == rhs.headers.map { [$0.0, $0.1] }
    }

    public static func text(_ status: Int, _ text: String, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(
            status: status, contentType: "text/plain; charset=utf-8", body: Array((text + "\n").utf8), headers: headers)
    }

    public static let eventStream: HTTPResponse = {
        var response = HTTPResponse(status: 200, contentType: "text/event-stream", body: [])
        response.streams = true
        response.headers = [("Cache-Control", "no-cache")]
        return response
    }()

    /// The bytes on the wire; a HEAD request gets the same head without the body.
    public func encoded(includingBody: Bool = true) -> [UInt8] {
        var head = "HTTP/1.1 \(status) \(Self.reason(status))\r\nContent-Type: \(contentType)\r\n"
        if !streams { head += "Content-Length: \(body.count)\r\nConnection: close\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        return Array(head.utf8) + (includingBody ? body : [])
    }

    static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 202: "Accepted"
        case 204: "No Content"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 408: "Request Timeout"
        case 411: "Length Required"
        case 413: "Content Too Large"
        case 431: "Request Header Fields Too Large"
        case 503: "Service Unavailable"
        case 505: "HTTP Version Not Supported"
        default: "Status \(status)"
        }
    }
}
