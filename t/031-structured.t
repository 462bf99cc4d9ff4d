# response_format through nginx and the engine process: json_object and
# json_schema on chat completions and (an extension) on /v1/completions,
# streaming and not, on the tiny random model (its text is noise, so the
# grammar alone makes it JSON: every output that finishes with "stop" must
# parse, and validate against the bounded schema; one cut by max_tokens
# is "length"), and the 400s: an unsupported keyword named with its path,
# a bad type, stop strings beside a constraint, a pattern too ambiguous
# to follow; and a schema the engine ends while generating (an anyOf of
# 100 strings that begin alike: too many parses open at a mask) is a 400
# invalid_request_error too, or that error event in a stream.
use Test::Nginx::Socket 'no_plan';
use IO::Socket::INET ();
use JSON::PP ();

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";

our $Person = '{"type": "object", "properties": {"name": {"type": "string", '
    . '"maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": '
    . '120}, "ok": {"type": "boolean"}}, "required": ["name", "age", "ok"], '
    . '"additionalProperties": false}';

# The person schema, checked by hand: exactly these keys and types.
sub person_ok {
    my $x = shift;
    return "not an object" unless ref $x eq 'HASH';
    return "keys " . join(',', sort keys %$x)
        unless join(',', sort keys %$x) eq 'age,name,ok';
    return "name" unless !ref $x->{name} && length($x->{name}) <= 8;
    return "age" unless $x->{age} =~ /^(?:0|[1-9][0-9]*)\z/
        && $x->{age} >= 0 && $x->{age} <= 120;
    return "ok" unless JSON::PP::is_bool($x->{ok});
    return "ok";
}

# The body's one choice: its text (message content, or text), and its
# finish_reason; for a stream, the deltas joined.
sub choice_text {
    my $body = shift;
    my ($text, $finish) = ('', undef);
    if ($body =~ /^data: /) {
        for my $ev ($body =~ /^data: (\{.*\})$/mg) {
            my $c = JSON::PP::decode_json($ev)->{choices}[0] or next;
            $text .= $c->{delta}{content} // $c->{text} // '';
            $finish = $c->{finish_reason} if defined $c->{finish_reason};
        }
        return ($text, $finish);
    }
    my $c = JSON::PP::decode_json($body)->{choices}[0];
    return ($c->{message} ? $c->{message}{content} : $c->{text},
            $c->{finish_reason});
}

# "stop: <check>" or "length: <prefix check>"
sub verdict {
    my ($body, $check) = @_;
    my ($text, $finish) = choice_text($body);
    if ($finish eq 'stop') {
        my $x = eval { JSON::PP->new->allow_nonref->decode($text) };
        return "stop: not JSON: $text\n" unless defined $x || $text eq 'null';
        return "stop: " . $check->($x) . "\n";
    }
    return "$finish: " . ($text =~ /^[\[{"0-9tfn-]/ ? "ok" : "bad $text")
        . "\n";
}

add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->http_config) {
        $block->set_value('http_config',
            "kvserve_model kvserve-tiny $Model;\n"
            . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;");
    }
    if (!defined $block->config) {
        $block->set_value('config', "location /v1/ { kvserve; }");
    }
});

run_tests();

# --- on the nginx of the last block: outputs checked in Perl -----------------

my $port = $Test::Nginx::Util::ServerPortForClient;

sub post {
    my ($uri, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 30)
        or die "connect: $!";
    print $s "POST $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Type: application/json\r\n"
        . "Content-Length: " . length($body) . "\r\n\r\n$body";
    local $/;
    my $r = <$s> // '';
    close $s;
    my ($head, $rest) = $r =~ /\A(.*?)\r\n\r\n(.*)\z/s;
    if ($head =~ /Transfer-Encoding: chunked/i) {
        my $out = '';
        while ($rest =~ s/\A([0-9a-fA-F]+)\r\n//) {
            my $n = hex $1;
            last if $n == 0;
            $out .= substr($rest, 0, $n, '');
            $rest =~ s/\A\r\n//;
        }
        $rest = $out;
    }
    my ($code) = $head =~ /\AHTTP\/1\.\d (\d+)/;
    return ($code, $rest);
}

sub chat_body {
    my %o = @_;
    my $rf = delete $o{rf};
    return JSON::PP->new->canonical->encode({
        model => 'kvserve-tiny',
        messages => [{ role => 'user', content => 'Who?' }],
        max_tokens => 300, response_format => $rf, %o });
}

my $person = JSON::PP::decode_json($Person);
my $schema_rf = { type => 'json_schema',
                  json_schema => { name => 'person', strict => JSON::PP::true,
                                   schema => $person } };

# seeds and samplers: each output validates and finishes with "stop"
for my $seed (1 .. 6) {
    for my $samp ({ temperature => 0 }, { temperature => 1.0 },
                  { temperature => 1.3, top_p => 0.9 })
    {
        my $b = chat_body(seed => $seed, rf => $schema_rf, %$samp);
        my ($code, $body) = post('/v1/chat/completions', $b);
        is($code, 200, "seed $seed: 200");
        is(verdict($body, \&person_ok), "stop: ok\n",
           "seed $seed temperature $samp->{temperature}: validates");
    }
}

# reproducible: the same seed, the same text
{
    my $b = chat_body(seed => 99, temperature => 1.1, rf => $schema_rf);
    my ($c1, $a) = post('/v1/chat/completions', $b);
    my ($c2, $z) = post('/v1/chat/completions', $b);
    is((choice_text($a))[0], (choice_text($z))[0], 'a seed repeats');
}

# json_object: an object when complete, a JSON prefix when cut
for my $seed (1 .. 3) {
    my ($code, $body) = post('/v1/chat/completions',
        chat_body(seed => $seed, max_tokens => 200,
                  rf => { type => 'json_object' }));
    like(verdict($body, sub { ref $_[0] eq 'HASH' ? 'ok' : 'not an object' }),
         qr/^(?:stop|length): ok$/, "json_object seed $seed");
}

# max_tokens cutting it short: "length"
{
    my ($code, $body) = post('/v1/chat/completions',
        chat_body(seed => 7, max_tokens => 3, rf => $schema_rf));
    is(verdict($body, \&person_ok), "length: ok\n", 'cut short: length');
}

# /v1/completions, an extension
{
    my $b = JSON::PP->new->encode({ model => 'kvserve-tiny', prompt => 'abc',
        max_tokens => 300, seed => 9, response_format => $schema_rf });
    my ($code, $body) = post('/v1/completions', $b);
    is($code, 200, 'completions: 200');
    is(verdict($body, \&person_ok), "stop: ok\n", 'completions: validates');
}

# streaming, both endpoints: the deltas join into a valid output
{
    my ($code, $body) = post('/v1/chat/completions',
        chat_body(seed => 21, stream => JSON::PP::true, rf => $schema_rf));
    like($body, qr/^data: /, 'chat stream: events');
    like($body, qr/data: \[DONE\]\n\n\z/, 'chat stream: [DONE]');
    is(verdict($body, \&person_ok), "stop: ok\n", 'chat stream: validates');

    my $b = JSON::PP->new->encode({ model => 'kvserve-tiny',
        prompt => 'colour:', max_tokens => 50, seed => 4,
        stream => JSON::PP::true,
        response_format => { type => 'json_schema', json_schema => {
            name => 'c', schema => { enum => ['red', 'green', 'blue'] } } } });
    ($code, $body) = post('/v1/completions', $b);
    is(verdict($body, sub { $_[0] =~ /^(?:red|green|blue)\z/ ? 'ok'
                                                            : "got $_[0]" }),
       "stop: ok\n", 'completions stream: an enum value');
}

# an anyOf of 100 strings of another minLength each: after the quote, 100
# free strings' parses are open, more than the engine's bound; it ends the
# request while generating, and it is the schema's fault: a 400 naming
# the cause, or in a stream the quote's event, the error event, then
# [DONE].  The stream is the same whether the worker read the quote
# before the fault or both at once (the engine hands over every token
# made since the last read): a slow worker once made it a bare 400
{
    my $wide = { anyOf => [ map { { type => 'string', minLength => $_ } }
                            0 .. 99 ] };
    my $wide_rf = { type => 'json_schema',
                    json_schema => { name => 'wide', schema => $wide } };
    my ($code, $body) = post('/v1/chat/completions',
        chat_body(seed => 3, max_tokens => 40, rf => $wide_rf));
    is($code, 400, 'ambiguous at run time: 400');
    like($body, qr/"message":"the output's grammar holds more than 32 parses open at once[^"]*","type":"invalid_request_error"/,
         'ambiguous at run time: invalid_request_error naming the cause');

    ($code, $body) = post('/v1/chat/completions',
        chat_body(seed => 3, max_tokens => 40, stream => JSON::PP::true,
                  rf => $wide_rf));
    is($code, 200, 'ambiguous at run time, streamed: the header was sent');
    my ($before) = $body =~ /\A(.*?)^data: \{"error"/ms;
    my ($text) = choice_text($before // '');
    is(substr($text, 0, 1), '"',
       'ambiguous at run time, streamed: the quote was sent before it');
    like($body, qr/^data: \{"error":\{"message":"the output's grammar holds more than 32 parses open at once[^"]*","type":"invalid_request_error"[^\n]*\n\ndata: \[DONE\]\n\n\z/m,
         'ambiguous at run time, streamed: the error event, then [DONE]');
}

__DATA__

=== TEST 1: an unsupported keyword is a 400 naming it and its path
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"x": {"type": "string", "format": "hostname"}}}}}}
--- error_code: 400
--- response_body_like eval
qr/^\{"error":\{"message":"response_format\.json_schema\.schema\.properties\.x\.format: 'hostname' is not supported[^"]*","type":"invalid_request_error","param":"response_format\.json_schema\.schema\.properties\.x\.format","code":"unsupported_value"\}\}\n?\z/



=== TEST 2: another: a keyword the compiler does not know
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": 2}}}}
--- error_code: 400
--- response_body_like eval
qr/"message":"response_format\.json_schema\.schema\.minProperties: [^"]*","type":"invalid_request_error","param":"response_format\.json_schema\.schema\.minProperties"/



=== TEST 3: a type we do not have is a 400 naming response_format.type
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}}
--- error_code: 400
--- response_body_like eval
qr/"param":"response_format\.type","code":"invalid_value"/



=== TEST 4: stop strings beside a constraint are refused, naming stop
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "stop": ["}"], "response_format": {"type": "json_object"}}
--- error_code: 400
--- response_body_like eval
qr/"param":"stop","code":"invalid_value"/



=== TEST 5: response_format text changes nothing
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "response_format": {"type": "text"}}
--- error_code: 200
--- response_body_like eval
qr/"finish_reason":"(?:length|stop)"/



=== TEST 6: a pattern whose repeats keep hundreds of parses open is a 400 naming it
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a{1,60}){1,60}$"}}}}}}
--- error_code: 400
--- response_body_like eval
qr/"message":"response_format\.json_schema\.schema\.properties\.x\.pattern: regex: the repeat ending at 16 can split the same text into iterations in up to 3600 ways at once[^"]*","type":"invalid_request_error","param":"response_format\.json_schema\.schema\.properties\.x\.pattern"/
