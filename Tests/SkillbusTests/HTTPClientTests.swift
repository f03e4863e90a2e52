import Testing

@testable import Skillbus

/// The openai planner's HTTP client without sockets: loading libcurl (and the refusal when it is missing),
/// response heads as libcurl hands them over, and libcurl's codes as the call's end.
@Suite("HTTP client")
struct HTTPClientTests {
    static func lines(_ text: String) -> [[UInt8]] {
        // By bytes: "\r\n" is one Character to a String.
        Array(text.utf8).split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast()
            .map { Array($0) + [UInt8(ascii: "\n")] }
    }

    @Test("a library that cannot be loaded is named, with dlopen's words and the package to install")
    func missingLibrary() throws {
        let result = LibCurl.load("libcurl-skillbus-missing.so.4")
        guard case .failure(let error) = result else {
            Issue.record("a library that does not exist was loaded")
            return
        }
        #expect(error.library == "libcurl-skillbus-missing.so.4")
        #expect(error.reason.contains("libcurl-skillbus-missing.so.4"), "\(error.reason)")
        #expect(error.message.hasPrefix("libcurl (libcurl-skillbus-missing.so.4) could not be loaded ("))
        #expect(error.message.contains("the openai planner's HTTP client needs it"))
        #expect(error.message.hasSuffix("install it with `apt-get install libcurl4` (`libcurl4t64` on Debian 13)"))
    }

    @Test("a library without libcurl's functions is refused, naming the first one it lacks")
    func notLibCurl() throws {
        guard case .failure(let error) = LibCurl.load("libm.so.6") else {
            Issue.record("libm was taken for libcurl")
            return
        }
        #expect(error.reason == "it has no function curl_global_init", "\(error.reason)")
    }

    @Test("libcurl.so.4 loads here (the tests need it), and loading again is fine")
    func standard() throws {
        #expect(throws: Never.self) { try LibCurl.standard.get() }
        #expect(throws: Never.self) { try LibCurl.load().get() }
    }

    @Test("without libcurl the openai planner refuses to start, saying what to install")
    func plannerRefuses() {
        let missing = LibCurl.load("libcurl-skillbus-missing.so.4")
        let error = #expect(throws: SkillbusError.self) { try OpenAIPlanner.requireHTTPClient(missing) }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.hasPrefix("openai: libcurl (libcurl-skillbus-missing.so.4) could not be loaded") == true)
        #expect(error?.message.contains("apt-get install libcurl4") == true)
        #expect(throws: Never.self) { try OpenAIPlanner.requireHTTPClient(.success(())) }
    }

    @Test("the final head: fields in order, names without case, repeated ones joined, folded lines continued")
    func head() throws {
        var parser = HTTPResponseHeadParser()
        var found: [HTTPStreamingCall.Response] = []
        let head =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Note:  one \r\n\t two\r\n"
            + "Set-Cookie: a=1\r\nset-cookie: b=2\r\n\r\n"
        for line in Self.lines(head) {
            if let response = parser.receive(line) { found.append(response) }
        }
        let response = try #require(found.first)
        #expect(found.count == 1 && response.statusCode == 200)
        #expect(response.value(forHTTPHeaderField: "content-type") == "text/event-stream")
        #expect(response.value(forHTTPHeaderField: "X-NOTE") == "one two")
        #expect(response.value(forHTTPHeaderField: "Set-Cookie") == "a=1, b=2")
        #expect(response.value(forHTTPHeaderField: "Retry-After") == nil)
        #expect(response.headerFields.map(\.name) == ["Content-Type", "X-Note", "Set-Cookie", "set-cookie"])
    }

    @Test(
        "1xx heads and followed redirects are passed over; a redirect without Location, and HTTP/2's line, are final",
        arguments: [
            ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many\r\nRetry-After: 2\r\n\r\n", 429, "2"),
            ("HTTP/1.1 307 Temporary Redirect\r\nLocation: /v2\r\n\r\nHTTP/2 200 \r\nretry-after: 3\r\n\r\n", 200, "3"),
            ("HTTP/1.1 302 Found\r\nRetry-After: 4\r\n\r\n", 302, "4"),
            ("HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.0 404 Not Found\r\nRetry-After: 5\r\n\r\n", 404, "5"),
        ])
    func heads(text: String, status: Int, retryAfter: String) {
        var parser = HTTPResponseHeadParser()
        let found = Self.lines(text).compactMap { parser.receive($0) }
        #expect(found.map(\.statusCode) == [status])
        #expect(found.first?.value(forHTTPHeaderField: "Retry-After") == retryAfter)
        #expect(found.first?.headerFields.count == 1, "fields of an earlier head do not carry over")
    }

    @Test("lines before a status line, and a blank line with no head, give nothing")
    func stray() {
        var parser = HTTPResponseHeadParser()
        #expect(parser.receive(Array("Content-Type: x\r\n".utf8)) == nil)
        #expect(parser.receive(Array("\r\n".utf8)) == nil)
        #expect(parser.receive(Array("HTTP/1.1 204 No Content\r\n".utf8)) == nil)
        #expect(parser.receive(Array("\r\n".utf8))?.statusCode == 204)
    }

    @Test(
        "libcurl's codes: 0 is the whole body, 28 the timeout, an abort follows an end already set, others keep their words"
    )
    func outcomes() {
        typealias Transfer = HTTPStreamingCall.Transfer
        #expect(Transfer.outcome(code: 0, "").failed == nil)
        #expect(Transfer.outcome(code: 28, "Operation timed out").failed == .timedOut)
        #expect(Transfer.outcome(code: 42, "Callback aborted").failed == .cancelled)
        #expect(Transfer.outcome(code: 23, "Failure writing output").failed == .cancelled)
        let refused = "Failed to connect to 127.0.0.1 port 9 after 0 ms: Couldn't connect to server"
        #expect(Transfer.outcome(code: 7, refused).failed == .transport(code: 7, refused))
    }

    @Test("a request's header fields: set replaces a name given before, whatever its case")
    func requestFields() {
        var request = HTTPStreamingCall.Request(url: "http://127.0.0.1:1/v1/chat/completions", body: [])
        request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        request.setValue("Bearer k", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "content-type")
        #expect(request.headerFields.map(\.name) == ["Authorization", "content-type"])
        #expect(request.headerFields.map(\.value) == ["Bearer k", "application/json"])
    }
}

extension Result {
    fileprivate var failed: Failure? {
        if case .failure(let failure) = self { failure } else { nil }
    }
}
