# Test::Nginx::Socket -- kvserve's stand-in for openresty's Test::Nginx::Socket,
# used only when the real one is not installed (see the Makefile). It reads
# the same t/*.t data files: this file owns the Test::Base glue, the
# per-block flow (restart, must_die, repeat_each), building and sending the
# requests, parsing the responses and every check. Test::Nginx::Util owns
# the settings, nginx.conf and the nginx process.
package Test::Nginx::Socket;

use strict;
use warnings;

# Test::Base's import() (inherited) hands 'no_plan' / tests => N to
# Test::More and exports our @EXPORT plus Test::Base's (plan, blocks, ...).
use parent 'Test::Base';

use HTTP::Response ();
use IO::Select ();
use IO::Socket::INET ();
use List::Util qw(max min shuffle);
use POSIX qw(EAGAIN);
use Scalar::Util qw(looks_like_number);
use Test::LongString qw(is_string);
use Test::More import => [qw(is isnt like unlike pass fail diag)];
use Time::HiRes qw(sleep);

use Test::Nginx::Util qw(
    :DEFAULT block_preprocessors error_log_lines expand_env parse_time
    reset_error_log_pos reset_rand_ports setup_server_root start_nginx
    stop_nginx write_config_file write_user_files
);

our @EXPORT = (@Test::Nginx::Util::EXPORT, 'run_tests');

my $PrevConfig;    # config of the block nginx was last started for

# ---- the run ---------------------------------------------------------------

sub run_tests {
    $ENV{TEST_NGINX_SERVER_PORT} //= $Test::Nginx::Util::ServerPort;
    my @blocks = Test::Base::blocks();
    @blocks = shuffle @blocks unless $Test::Nginx::Util::NoShuffle;
    for my $block (@blocks) {
        $_->($block) for block_preprocessors();
        $block->set_value(name => "$0 " . $block->name);
        run_block($block);
    }
}

# One data block: (re)start nginx for its config, then run its requests
# repeat_each times. A must_die block only starts nginx and checks the log.
sub run_block {
    my $block = shift;
    my $name  = $block->name;
    return if skip_block($block);
    reset_rand_ports();
    my $config = expand_env(scalar $block->config, $name);

    if (defined $config) {
        $PrevConfig = $config;
        stop_nginx($name);
        setup_server_root();
        write_user_files($block);
        write_config_file($block, $config);
        return run_must_die($block) if defined $block->must_die;
        start_or_bail($block);
    } elsif (!defined $PrevConfig) {
        bail_out("$name - No '--- config' section specified and could not get previous one.");
    }

    reset_error_log_pos();
    for my $i (0 .. $Test::Nginx::Util::RepeatEach - 1) {
        write_user_files($block) if $i > 0;
        run_requests($block, $i);
    }
}

# "--- skip_eval: N: CODE", as the real Test::Nginx has it: when CODE
# evaluates true the block runs nothing and N tests are reported skipped
# (the block's name says why).
sub skip_block {
    my $block = shift;
    my $spec  = $block->skip_eval;
    return 0 unless defined $spec;
    $spec =~ /^\s*(\d+)\s*:\s*(.*?)\s*\z/s
        or bail_out($block->name . " - bad skip_eval \"$spec\" (N: CODE)");
    my ($n, $code) = ($1, $2);
    my $skip = eval $code;
    bail_out($block->name . " - skip_eval: $@") if $@;
    return 0 unless $skip;
    SKIP: { Test::More::skip($block->name . " - skip_eval", $n) }
    return 1;
}

sub start_or_bail {
    my $block  = shift;
    my $status = start_nginx($block);
    if ($status != 0) {
        my $lines = error_log_lines();
        diag("the end of error.log:\n", join '', @$lines[max(0, $#$lines - 19) .. $#$lines]);
        bail_out($block->name . " - Cannot start nginx (status code $status).");
    }
    sleep $Test::Nginx::Util::Sleep;
}

# nginx must fail to start: one subtest for that, then the error_log checks
# against what it wrote at startup. An nginx that did start is stopped again.
sub run_must_die {
    my $block    = shift;
    my $name     = $block->name;
    my $must_die = $block->must_die;
    reset_error_log_pos();
    for my $i (0 .. $Test::Nginx::Util::RepeatEach - 1) {
        my $status = start_nginx($block);
        if (looks_like_number($must_die)) {
            is($status >> 8, $must_die, "$name - die with the expected exit code");
        } else {
            isnt($status, 0, "$name - die as expected");
        }
        check_error_log($block, $i);
        next if $status != 0;
        warn "WARNING: $name - nginx must die but it does not; killing it (req $i)\n";
        stop_nginx($name);
    }
}

# Send the block's requests (one connection each, or all pipelined on one)
# and check each response. The error log is checked after every request,
# as Test::Nginx does.
sub run_requests {
    my ($block, $repeat_idx) = @_;
    my $requests   = build_requests($block);
    my $pipelined  = $block->pipelined_requests;
    my $count      = $pipelined ? @$pipelined : @$requests;
    my $need_array = $pipelined || @$requests > 1;
    my $timeout    = parse_time(scalar $block->timeout) // $Test::Nginx::Util::Timeout;
    my $ctx        = { repeat_idx => $repeat_idx, need_array => $need_array };

    my $req_idx = 0;
    for my $packets (@$requests) {
        my $raw = send_request($block, $packets, $timeout);
        my $is_head = join('', map { $_->{value} } @$packets) =~ /^\s*HEAD\s/;
        for my $n (reverse 0 .. ($pipelined ? $count - 1 : 0)) {
            $raw = check_response($block, $raw, $is_head, { %$ctx, req_idx => $req_idx }, $n > 0);
            wait_and_check_error_log($block, $repeat_idx) if $req_idx < $count - 1;
            $req_idx++;
        }
    }
    wait_and_check_error_log($block, $repeat_idx);
}

sub wait_and_check_error_log {
    my ($block, $repeat_idx) = @_;
    sleep $block->wait if $block->wait;
    check_error_log($block, $repeat_idx);
}

# ---- building requests ----------------------------------------------------------

# Returns a list of requests, each a list of packets { value, delay_before }.
sub build_requests {
    my $block = shift;
    my $name  = $block->name;
    my $more  = $block->more_headers // '';

    if (defined(my $raw = $block->raw_request)) {
        return [[ map { { value => $_ } } ref $raw eq 'ARRAY' ? @$raw : $raw ]];
    }

    if (defined(my $reqs = $block->pipelined_requests)) {
        bail_out("$name - invalid entries in --- pipelined_requests") if ref $reqs ne 'ARRAY';
        my $data = '';
        for my $i (0 .. $#$reqs) {
            my $conn = $i == $#$reqs ? 'close' : 'keep-alive';
            my $req = build_request($name, [{ value => expand_env($reqs->[$i], $name) }],
                                    headers_for($name, $more, $i), $conn);
            $data .= $req->[0]{value};
        }
        return [[{ value => $data }]];
    }

    my $request = $block->request;
    if (!ref $request) {
        $request =~ s/^\s*#[^\n]+\s+|^\s+//gs if defined $request;
        return [ build_request($name, [{ value => $request }], headers_for($name, $more, 0), 'close') ];
    }
    bail_out("$name - invalid --- request: must be a string or an array of requests")
        if ref $request ne 'ARRAY';

    my @requests;
    for my $i (0 .. $#$request) {
        my $one = $request->[$i];
        my @packets = map { ref $_ eq 'HASH' ? {%$_} : { value => $_ } } ref $one ? @$one : $one;
        push @requests, build_request($name, \@packets, headers_for($name, $more, $i), 'close');
    }
    return \@requests;
}

sub headers_for {
    my ($name, $more, $i) = @_;
    return $more if ref $more ne 'ARRAY';
    bail_out("$name - --- more_headers lacks data for request $i") unless defined $more->[$i];
    return $more->[$i];
}

# "METHOD [URI [HTTP/x.y]]\n[body]" spread over packets -> the same packets
# with a full request head in the first one and each packet's share of the
# body. Host, Connection and Content-Length are added as Test::Nginx does.
sub build_request {
    my ($name, $packets, $more_headers, $conn) = @_;
    my ($headers, $chunked) = parse_more_headers($more_headers);
    my $text = join '', map { $_->{value} // '' } @$packets;

    my ($line) = $text =~ /\A([^\n]*\n?)/;
    bail_out("$name - Request line should be non-empty") if $line !~ /\S/;
    my ($method, $uri, $version) = $line =~ /^\s*(\S+)(?: +(\S+))?(?: +(\S+))?\s*$/
        or bail_out("$name - Request line is not valid. Should be 'meth [url [version]]' but got \"$line\".");

    my ($body_from, $body_to) = (length $line, length $text);
    if (!$chunked && $body_to > $body_from && $headers !~ /(?:^|\n)Content-Length:/) {
        $body_from++ while $body_from < $body_to && substr($text, $body_from, 1) =~ /\s/;
        $body_to--   while $body_to > $body_from && substr($text, $body_to - 1, 1) =~ /\s/;
        $headers .= 'Content-Length: ' . ($body_to - $body_from) . "\r\n";
    }
    $headers = "Connection: $conn\r\n$headers" if $headers !~ /(?:^|\n)Connection/i;
    $headers = "Host: $Test::Nginx::Util::ServerName\r\n$headers" if $headers !~ /(?:^|\n)Host:/i;
    my $head = sprintf "%s %s %s\r\n%s\r\n", $method, $uri // '/', $version // 'HTTP/1.1', $headers;

    my ($offset, @out) = (0);
    for my $p (@$packets) {
        my $len  = length($p->{value} // '');
        my $from = max($offset, $body_from);
        my $to   = min($offset + $len, $body_to);
        my $part = $to > $from ? substr($text, $from, $to - $from) : '';
        push @out, { %$p, value => (@out ? '' : $head) . $part };
        $offset += $len;
    }
    return \@out;
}

# more_headers lines -> "Name: value\r\n..." and whether the body is chunked.
sub parse_more_headers {
    my $in = shift;
    my ($out, $chunked) = ('', 0);
    for my $line (split /\n+/, $in) {
        next if $line =~ /^\s*#/;
        my ($key, $val) = split /:\s*/, $line, 2;
        $val //= '';
        $chunked = 1 if lc $key eq 'transfer-encoding' && $val eq 'chunked';
        $out .= "$key: $val\r\n";
    }
    return ($out, $chunked);
}

# ---- the socket -------------------------------------------------------------------

# Write the packets (honouring delay_before), then read until the server
# closes. $timeout bounds each wait for I/O; running into it fails the
# test unless the block says --- abort.
sub send_request {
    my ($block, $packets, $timeout) = @_;
    my $sock = connect_to_server($block->name, $timeout) or return '';
    local $SIG{PIPE} = 'IGNORE';

    my @queue = @$packets;
    my $buf   = (shift @queue)->{value};
    my $resp  = '';
    my $sel   = IO::Select->new($sock);
    my $writing = 1;
    while (1) {
        my ($readable, $writable) = IO::Select->select($sel, $writing ? $sel : undef, undef, $timeout);
        if (!$readable && !$writable) {
            fail("ERROR: client socket timed out - " . $block->name . "\n") unless defined $block->abort;
            last;
        }
        if ($writable && @$writable) {
            ($buf, $writing) = write_some($block, $sock, $buf, \@queue);
        }
        if ($readable && @$readable) {
            my $n = sysread $sock, my $chunk, 65536;
            next if !defined $n && $! == EAGAIN;
            warn "WARNING: ", $block->name, " - HTTP response read failure: $!\n" unless defined $n;
            last unless $n;
            $resp .= $chunk;
        }
    }
    close $sock;
    return $resp;
}

# Writes what it can of $buf; moves on to the next packet once it is out.
# Returns the new buffer and whether there is still something to write.
sub write_some {
    my ($block, $sock, $buf, $queue) = @_;
    my $n = syswrite $sock, $buf;
    if (!defined $n) {
        return ($buf, 1) if $! == EAGAIN;
        warn "WARNING: ", $block->name, " - write failed: $!\n";
        return ('', 0);
    }
    $buf = substr $buf, $n;
    return ($buf, 1) if length $buf;
    if (my $next = shift @$queue) {
        sleep $next->{delay_before} if $next->{delay_before};
        return ($next->{value}, 1);
    }
    if (defined(my $how = $block->shutdown)) {
        shutdown $sock, $how =~ /^\d+$/ ? $how : 1;
    }
    return ('', 0);
}

sub connect_to_server {
    my ($name, $timeout) = @_;
    my ($addr, $port) = ($Test::Nginx::Util::ServerAddr, $Test::Nginx::Util::ServerPortForClient);
    for (1 .. 30) {
        my $sock = IO::Socket::INET->new(
            PeerAddr => $addr, PeerPort => $port, Proto => 'tcp', Timeout => $timeout,
        );
        if ($sock) {
            $sock->blocking(0);
            return $sock;
        }
        sleep 0.1;
    }
    fail("$name - Can't connect to $addr:$port: $! (aborted)\n");
    return undef;
}

# ---- responses ------------------------------------------------------------------

# Parse one response off the front of $raw and run the response checks on
# it. Returns the bytes after it (the next pipelined response).
sub check_response {
    my ($block, $raw, $is_head, $ctx, $more_expected) = @_;
    return '' if defined $block->ignore_response;

    my ($res, $raw_headers, $left) = parse_response($block->name, $raw, $is_head);
    if (defined $left && !$more_expected) {
        (my $shown = $left) =~ s/([\0-\037\200-\377])/sprintf('\x{%02x}', ord $1)/eg;
        warn "WARNING: ", $block->name, " - unexpected extra bytes after last chunk in response: \"$shown\"\n";
    }
    check_status($block, $res, $ctx);
    check_raw_headers($block, $raw_headers, $ctx);
    check_headers($block, $res, $raw_headers, $ctx);
    check_body($block, $res, $ctx);
    return $left // '';
}

# Returns (HTTP::Response or undef, raw header block, bytes left over).
sub parse_response {
    my ($name, $raw, $is_head) = @_;
    my $raw_headers = $raw =~ /\A(.*?\r\n)\r\n/s ? $1 : '';
    my $res = HTTP::Response->parse($raw);
    $res->code(undef) if defined $res->code && $res->code !~ /^\d+$/;
    my $code = $res->code // 0;
    return ($res, $raw_headers, undef) if $code == 304 || $code == 101;

    my $te  = $res->header('Transfer-Encoding');
    my $len = $res->header('Content-Length');
    if (defined $te && $te eq 'chunked') {
        my ($body, $left, $err) = decode_chunked($res->content // '');
        if (defined $err) {
            fail("$name - $err");
            return (undef, $raw_headers, undef);
        }
        $res->content($body);
        return ($res, $raw_headers, $left);
    }
    if (defined $len && $len =~ /^\d+$/) {
        my $body = $res->content // '';
        if (length $body > $len) {
            $res->content(substr $body, 0, $len);
            return ($res, $raw_headers, substr $body, $len);
        }
        warn "WARNING: $name - response body truncated: $len expected, but got ", length $body, "\n"
            if length $body < $len && !$is_head;
    }
    return ($res, $raw_headers, undef);
}

# Returns (decoded body, bytes after the last chunk or undef, error or undef).
sub decode_chunked {
    my $raw = shift;
    my $body = '';
    pos($raw) = 0;
    while ($raw =~ /\G[ \t]*([0-9A-Fa-f]+)[ \t]*(?:;[^\r\n]*)?\r\n/gc) {
        my $size = hex $1;
        if ($size == 0) {
            $raw =~ /\G(?:[^\r\n]+\r\n)*\r\n/gc
                or return (undef, undef, 'invalid chunked data received (bad last chunk or trailer).');
            my $left = substr $raw, pos $raw;
            return ($body, length $left ? $left : undef, undef);
        }
        return (undef, undef, 'invalid chunked data received (not enough octets for the data section)')
            if length($raw) - pos($raw) < $size;
        $body .= substr $raw, pos($raw), $size;
        pos($raw) += $size;
        $raw =~ /\G\r\n/gc or return (undef, undef, 'invalid chunked data received (expected CRLF).');
    }
    my $rest = substr $raw, pos($raw) // 0;
    return (undef, undef, length $rest ? "invalid chunked body received: $rest" : 'no last chunk found');
}

# ---- response checks ----------------------------------------------------------

# A section's value for this request: several requests need an array.
sub indexed_value {
    my ($block, $value, $ctx) = @_;
    my $is_array = ref $value eq 'ARRAY';
    if ($ctx->{need_array} && !$is_array) {
        bail_out($block->name . " - You asked for many requests, the expected results should be arrays as well.");
    }
    return $is_array ? $value->[$ctx->{req_idx}] : $value;
}

sub check_status {
    my ($block, $res, $ctx) = @_;
    my $name = $block->name;
    my $got  = ($res && $res->code) || '';
    if (defined $block->error_code_like) {
        my $re = indexed_value($block, $block->error_code_like, $ctx);
        like($got, qr/$re/sm, "$name - status code ok");
    } elsif (defined $block->error_code) {
        is($got, indexed_value($block, $block->error_code, $ctx), "$name - status code ok");
    } else {
        is($got, 200, "$name - status code ok");
    }
}

sub check_raw_headers {
    my ($block, $raw_headers, $ctx) = @_;
    my $name = $block->name;
    if (defined $block->raw_response_headers_like) {
        my $re = indexed_value($block, $block->raw_response_headers_like, $ctx);
        like($raw_headers, qr/$re/s, "$name - raw resp headers like");
    }
    if (defined $block->raw_response_headers_unlike) {
        my $re = indexed_value($block, $block->raw_response_headers_unlike, $ctx);
        unlike($raw_headers, qr/$re/s, "$name - raw resp headers unlike");
    }
}

# response_headers: exact values, "!Name" means absent. Only when it is
# missing, response_headers_like: values are regexes anchored at both ends.
sub check_headers {
    my ($block, $res, $raw_headers, $ctx) = @_;
    my $name = $block->name;
    if (defined $block->response_headers) {
        for my $h (parse_expected_headers(indexed_value($block, $block->response_headers, $ctx))) {
            my ($key, $val) = @$h;
            if (!defined $val) {
                unlike($raw_headers, qr/^\s*\Q$key\E\s*:/ms,
                       "$name - header $key not present in the raw headers");
                next;
            }
            is(($res && $res->header($key)) // '', expand_server_port($val), "$name - header $key ok");
        }
    } elsif (defined $block->response_headers_like) {
        for my $h (parse_expected_headers(indexed_value($block, $block->response_headers_like, $ctx))) {
            my ($key, $re) = @$h;
            like(($res && $res->header($key)) // '', qr/^$re$/, "$name - header $key like ok");
        }
    }
}

# "Name: value" lines -> ([name, value], ...); "!Name" -> [name, undef].
sub parse_expected_headers {
    my $text = shift // '';
    my @headers;
    for my $line (split /\n/, $text) {
        $line =~ s/^\s+|\s+$//g;
        next if $line eq '';
        if ($line =~ s/^!\s*//) {
            push @headers, [$line, undef];
        } else {
            push @headers, [split /\s*:\s*/, $line, 2];
        }
    }
    return @headers;
}

sub expand_server_port {
    my $s = shift;
    return $s if !defined $s || ref $s;
    $s =~ s/\$ServerPortForClient\b/$Test::Nginx::Util::ServerPortForClient/g;
    $s =~ s/\$ServerPort\b/$Test::Nginx::Util::ServerPort/g;
    return $s;
}

# response_body (exact, or a qr// from eval); otherwise response_body_like,
# otherwise response_body_unlike.
sub check_body {
    my ($block, $res, $ctx) = @_;
    my $name = $block->name;
    my $got  = $res ? $res->content : undef;
    my $reqs = "(repeated req $ctx->{repeat_idx}, req $ctx->{req_idx})";

    if (defined $block->response_body) {
        my $expected = indexed_value($block, $block->response_body, $ctx);
        $expected = expand_env(expand_server_port($expected), $name);
        if (ref $expected) {
            like($got, $expected, "$name - response_body - like $reqs");
        } elsif ($Test::Nginx::Util::NoLongString) {
            Test::Base::is($got, $expected, "$name - response_body - response is expected $reqs");
        } else {
            is_string($got, $expected, "$name - response_body - response is expected $reqs");
        }
        return;
    }

    my $type = defined $block->response_body_like   ? 'like'
             : defined $block->response_body_unlike ? 'unlike'
             : undef;
    return unless $type;
    my $section = "response_body_$type";
    my $pattern = expand_server_port(indexed_value($block, $block->$section, $ctx));
    (my $summary = $got // '') =~ s/\s+/ /g;
    $summary =~ s/^ | $//g;
    my $check = $type eq 'like' ? \&like : \&unlike;
    $check->($got, qr/$pattern/s, "$name - response_body_$type - response is expected ($summary)");
}

# ---- error.log checks ----------------------------------------------------------

# Checks the error.log lines written since the last check: grep_error_log,
# error_log (each pattern must match a line), no_error_log (no pattern may
# match). Also warns about [alert]/[crit]/[emerg] lines the block does not
# expect, and fails on assertion failures.
sub check_error_log {
    my ($block, $repeat_idx) = @_;
    my $lines = error_log_lines();
    check_grep_error_log($block, $lines, $repeat_idx);
    check_log_patterns($block, $lines, $repeat_idx, 1) if defined $block->error_log;
    check_log_patterns($block, $lines, $repeat_idx, 0) if defined $block->no_error_log;
    warn_unexpected_severe_lines($block, $lines);
    for my $line (grep { /\bAssertion .*?failed\b/ } @$lines) {
        chomp(my $l = $line);
        fail($block->name . " - $l\n");
    }
}

# A section's patterns as a list: text lines (literal substrings) or qr//s.
sub log_patterns {
    my $pats = shift;
    return grep { defined } @$pats if ref $pats eq 'ARRAY';
    return ($pats) if ref $pats;
    chomp $pats;
    return split /\n+/, $pats;
}

sub line_matches {
    my ($line, $pat) = @_;
    return ref $pat ? $line =~ $pat : index($line, $pat) >= 0;
}

sub check_log_patterns {
    my ($block, $lines, $repeat_idx, $wanted) = @_;
    my $name = $block->name;
    my $section = $wanted ? $block->error_log : $block->no_error_log;
    for my $pat (log_patterns($section)) {
        my ($i) = grep { line_matches($lines->[$_], $pat) } 0 .. $#$lines;
        my $p = fmt_str($pat);
        if ($wanted && defined $i) {
            pass("$name - pattern \"$pat\" matches a line in error.log (req $repeat_idx)");
        } elsif ($wanted) {
            fail("$name - pattern \"$pat\" should match a line in error.log (req $repeat_idx)");
            diag(log_excerpt($lines));
        } elsif (defined $i) {
            fail("$name - pattern \"$p\" should not match any line in error.log but matches line \""
                 . fmt_str($lines->[$i]) . "\" (req $repeat_idx)\n"
                 . join '', @$lines[$i + 1 .. min($i + 9, $#$lines)]);
        } else {
            pass("$name - pattern \"$p\" does not match a line in error.log (req $repeat_idx)");
        }
    }
}

# What a failed error_log check searched: its last 20 entries above debug.
sub log_excerpt {
    my $lines = shift;
    my @shown = grep { m{^\d{4}/\d\d/\d\d [\d:]+ \[(?!debug\])} } @$lines;
    splice @shown, 0, @shown - 20 if @shown > 20;
    return sprintf("searched %d error.log line(s)%s", scalar @$lines,
                   @shown ? "; the non-debug ones (up to 20):\n" . join('', @shown) : '.');
}

sub check_grep_error_log {
    my ($block, $lines, $repeat_idx) = @_;
    my $name = $block->name;
    my $pat = $block->grep_error_log;
    my $expected = $block->grep_error_log_out;
    if (!defined $pat) {
        bail_out("$name - No --- grep_error_log defined but --- grep_error_log_out is defined")
            if defined $expected;
        return;
    }
    bail_out("$name - No --- grep_error_log_out defined but --- grep_error_log is defined")
        unless defined $expected;
    $pat = $pat->[$repeat_idx] if ref $pat eq 'ARRAY';
    $expected = $expected->[$repeat_idx] if ref $expected eq 'ARRAY';
    $expected = expand_env($expected, $name);

    my $got = '';
    for my $line (@$lines) {
        my $hit = ref $pat ? ($line =~ /$pat/p && ${^MATCH}) : (index($line, $pat) >= 0 && $pat);
        $got .= "$hit\n" if $hit && $hit !~ /\n/;
    }
    my $title = "$name - grep_error_log_out (req $repeat_idx)";
    if (ref $expected) {
        like($got, $expected, $title);
    } elsif ($Test::Nginx::Util::NoLongString) {
        Test::Base::is($got, $expected, $title);
    } else {
        is_string($got, $expected, $title);
    }
}

sub warn_unexpected_severe_lines {
    my ($block, $lines) = @_;
    my @sections = grep { defined } $block->error_log, $block->no_error_log;
    for my $level (qw(alert crit emerg)) {
        next if grep { section_mentions($_, "[$level") } @sections;
        warn "WARNING: ", $block->name, " - ", fmt_str($_), "\n" for grep { /\[$level\]/ } @$lines;
    }
}

sub section_mentions {
    my ($value, $text) = @_;
    return grep { section_mentions($_, $text) } @$value if ref $value eq 'ARRAY';
    return defined $value && index("$value", $text) >= 0;
}

sub fmt_str {
    my $s = shift;
    chomp $s;
    $s =~ s/"/\\"/g;
    $s =~ s/\r/\\r/g;
    $s =~ s/\n/\\n/g;
    return $s;
}

1;
