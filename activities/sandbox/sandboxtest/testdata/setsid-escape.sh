setsid <% .marker %> & sleep <% .sleep %>
