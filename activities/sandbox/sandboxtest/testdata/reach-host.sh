for a in <% range .addrs %><% . %> <% end %>; do timeout 5 bash -c "exec 3<>/dev/tcp/${a%%:*}/${a#*:} && echo CONNECTED $a; cat <&3" 2>&1; done
<%- range .sockets %>
python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect("<% . %>"); print("CONNECTED <% . %>"); print(s.recv(100))' 2>&1
<%- end %>
true
